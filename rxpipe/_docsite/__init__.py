"""The manual's generated parts (the site is built with ``mkdocs build --strict``; ``mkdocs.yml``).

- :mod:`.reference`: the API reference pages, one per public module, and every documented
  callable's marble diagrams drawn as SVG pictures from its docstring (the same blocks
  ``tests/docstring_marbles/`` plays), generated while the site builds.
- :mod:`.migration`: ``docs/migration.md``, every reactivex 6.1 operator and source with its
  rxpipe counterpart or the reason it has none.
- :mod:`.tables`: the settings tables of the docs pages, generated from the pipelines' schemas.
- :mod:`.hooks` (MkDocs hooks) and :mod:`.griffe_ext` (a Griffe extension) wire them into the build.

``python -m rxpipe._docsite`` regenerates the committed parts (tables and the migration page);
the tests fail while one is stale.
"""

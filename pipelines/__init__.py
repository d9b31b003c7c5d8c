"""The pipelines shipped with rxpipe, installed as ``rxpipe.pipelines``: each module is a pipeline
file that ``rxpipe run NAME`` (and :func:`rxpipe.loader.load_pipeline`) finds by its name from
any directory, as well as by its path in the checkout (``rxpipe run pipelines/NAME.py``).

- ``hello``: the smallest tour of the operators (prints ten lines).
- ``llm_gateway``: the OpenAI-compatible gateway in front of a simulated vLLM-like engine, or of
  workers behind a broker (``broker_url``).
- ``llm_router``: one front for several OpenAI-compatible backends (``backends``).
- ``llm_worker``: a worker serving a gateway's requests from a broker.
- ``llm_gateway_redis``: the gateway on Redis Streams by its older name (``redis_url``).
- ``embed_documents``: documents to embeddings, batched, in order.
- ``seed_petproject``: a small slow service with a latency budget, to watch ``rxpipe load`` against.
"""

"""embed_documents: split documents into chunks, embed the chunks in batches, pair each vector
with its chunk — an ordinary pipeline beyond the gateway, with demand end to end.

    rxpipe run pipelines/embed_documents.py                      # one line per chunk
    rxpipe run pipelines/embed_documents.py --set chunk_words=4

``embed`` is a deterministic toy (letter counts in 4 buckets, normalised) standing in for a real
model's batch call (a sentence-transformers ``model.encode(texts)``, say): it runs in a worker
thread, one call per batch of up to 8 chunks, 2 batches at a time. The chunks are computed once
and shared by both sides of ``zip`` through ``broadcast``; ``map_async`` keeps the order, so the
n-th vector is the n-th chunk's.
"""

import asyncio
import math

import rxpipe as rx
from rxpipe import operators as ops

DOCUMENTS = [
    ("faq", "Backpressure means the consumer sets the pace and the producer follows it"),
    ("guide", "Split documents into chunks embed each chunk and pair the vectors with their chunks"),
    ("note", "Demand travels upstream"),
]


def split(document: tuple[str, str], words: int) -> list[tuple[str, str]]:
    """A document as ``(id#n, text)`` chunks of ``words`` words each."""
    doc_id, text = document
    tokens = text.split()
    return [(f"{doc_id}#{n}", " ".join(tokens[start:start + words]))
            for n, start in enumerate(range(0, len(tokens), words))]


def embed(texts: list[str]) -> list[tuple[float, ...]]:
    """The toy model: one 4-dimensional unit vector per text, for a whole batch at once."""
    vectors = []
    for text in texts:
        counts = [0.0] * 4
        for char in text.lower():
            if char.isalpha():
                counts[ord(char) % 4] += 1
        norm = math.sqrt(sum(c * c for c in counts)) or 1.0
        vectors.append(tuple(round(c / norm, 2) for c in counts))
    return vectors


async def embed_batch(texts: list[str]) -> list[tuple[float, ...]]:
    return await asyncio.to_thread(embed, texts)  # a model call must not block the event loop


def pipeline(config: dict) -> rx.Flowable:
    if set(config) - {"chunk_words"}:
        raise ValueError(f"unknown setting(s) {sorted(set(config) - {'chunk_words'})}; this takes chunk_words")
    words = config.get("chunk_words", 6)
    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise ValueError(f"chunk_words must be an int >= 1, got {words!r}")
    chunks = rx.from_iterable(DOCUMENTS).pipe(ops.flat_map(lambda doc: split(doc, words), name="split"))
    for_zip, for_model = chunks.pipe(ops.broadcast(2))
    vectors = for_model.pipe(
        ops.map(lambda chunk: chunk[1]),
        ops.batch(8, max_delay_s=0.05, name="batch"),             # up to 8 texts per model call
        ops.map_async(embed_batch, concurrency=2, name="embed"),  # 2 calls at a time, in order
        ops.flat_map(lambda batch: batch, name="unbatch"),        # one vector per chunk again
    )
    return rx.zip(for_zip, vectors, name="pair").pipe(
        ops.map(lambda pair: f"{pair[0][0]:8} {list(pair[1])}  {pair[0][1]!r}", name="format"))

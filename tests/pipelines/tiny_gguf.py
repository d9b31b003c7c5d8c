"""A tiny random-weight llama model in GGUF (written with the ``gguf`` package in about a second,
no download): enough for llama.cpp's server to load and generate garbage at a few ms per token.

The tokenizer is a SentencePiece-style ("llama") vocabulary of the three control tokens, the 256
byte tokens and a few words, so random output decodes to bytes that are often not valid UTF-8 on
their own: the server then streams chunks with empty text, as real models do for split characters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_EMBD = 64
N_FF = 128
N_HEAD = 4
N_LAYER = 1
N_CTX = 512
WORDS = ["▁the", "▁a", "▁cat", "▁dog", "▁and", "▁runs", "▁fast", "."]


def write_tiny_llama(path: Path, seed: int = 0, pooling: str | None = None) -> Path:
    """Write the model to ``path``; ``pooling`` (``"mean"``, ``"cls"``, ``"last"``): the pooling
    of its embeddings (one vector per input, as an embedding model's), else none (one per token)."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + WORDS
    types = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
             + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(WORDS))
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("rxpipe-tiny")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 3 + [-1000.0] * 256 + [-float(i) for i in range(len(WORDS))])
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    if pooling is not None:
        writer.add_pooling_type(gguf.PoolingType[pooling.upper()])

    def tensor(name: str, *shape: int) -> None:
        data = rng.standard_normal(shape).astype(np.float32) * (0.02 if len(shape) > 1 else 1.0)
        if len(shape) == 1:
            data = np.ones(shape, dtype=np.float32)
        writer.add_tensor(name, data)

    tensor("token_embd.weight", vocab, N_EMBD)
    tensor("output_norm.weight", N_EMBD)
    tensor("output.weight", vocab, N_EMBD)
    for i in range(N_LAYER):
        tensor(f"blk.{i}.attn_norm.weight", N_EMBD)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{name}.weight", N_EMBD, N_EMBD)
        tensor(f"blk.{i}.ffn_norm.weight", N_EMBD)
        tensor(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

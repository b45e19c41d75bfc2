"""The exported MiniLM in onnxruntime plus the mean pooling sentence-transformers would add.

Its own module so that the embedding workers (``encoder_pool``) load exactly this code, with the
same session options, without the embedder that starts them: vectors from a worker and from the
daemon's own session are then byte-equal.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from tokenizers import Tokenizer

MODEL_DIM = 384
# sentence_bert_config.json of the package; tokenizer.json alone would cut at 128.
MAX_TOKENS = 256
# One text per run is too small to split across cores: one thread gave ~2x the texts/s of two
# on 2 cores (bench/embed_speed.py), and a query leaves the other core to numpy.
ONNX_THREADS = 1


class OnnxEncoder:
    """The exported model in onnxruntime, plus the pooling sentence-transformers would add."""

    def __init__(self, model_file: Path, tokenizer_file: Path, threads: int = ONNX_THREADS) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self._tokenizer_file = tokenizer_file
        # The padding tokenizer of batched runs is made at the first one: memstore encodes a text
        # a run (embedder.ONNX_TEXTS_PER_RUN), and each tokenizer holds ~9 MB (the vocabulary).
        self._tok: Tokenizer | None = None
        # One text a run needs no padding: the whole list is tokenised in one call (one trip
        # into Rust instead of one per text) with the same ids a batch of one would get.
        self._tok_alone = Tokenizer.from_file(str(tokenizer_file))
        self._tok_alone.enable_truncation(MAX_TOKENS)
        self._tok_alone.no_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads  # 0: one per physical core
        opts.inter_op_num_threads = 1
        if threads == 1:
            # See embedder.SMALL_BATCH: a query must leave the cores to numpy's passes right after.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        self._session = ort.InferenceSession(str(model_file), opts, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Mean-pooled vectors, not normalised (the caller does that)."""
        import numpy as np

        out = np.empty((len(texts), MODEL_DIM), dtype=np.float32)
        if batch_size == 1:
            run = self._session.run
            for i, enc in enumerate(self._tok_alone.encode_batch([t.strip() for t in texts])):
                n = len(enc.ids)
                feed = {
                    "input_ids": np.array([enc.ids], dtype=np.int64),
                    "attention_mask": np.ones((1, n), dtype=np.int64),
                    "token_type_ids": np.array([enc.type_ids], dtype=np.int64),
                }
                hidden = run(["last_hidden_state"], feed)[0]
                # The same arithmetic as the batched path below with a mask of ones: the bytes
                # must not depend on which path made them.
                weights = np.ones((1, n, 1), dtype=np.float32)
                out[i] = ((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9))[0]
            return out
        if self._tok is None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(str(self._tokenizer_file))
            self._tok.enable_truncation(MAX_TOKENS)
            self._tok.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (to the batch's longest)
        # Longest first, as sentence-transformers does: a batch pads to its longest text only.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = self._tok.encode_batch([texts[i].strip() for i in idx])
            mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
            feed = {
                "input_ids": np.array([e.ids for e in batch], dtype=np.int64),
                "attention_mask": mask,
                "token_type_ids": np.array([e.type_ids for e in batch], dtype=np.int64),
            }
            hidden = self._session.run(["last_hidden_state"], feed)[0]
            weights = mask[:, :, None].astype(np.float32)
            out[idx] = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return out

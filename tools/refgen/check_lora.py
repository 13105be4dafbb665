"""Check a LoRA adapter written by colossal against PEFT:
check_lora.py ADAPTER_DIR MERGED_DIR

ADAPTER_DIR is a save without merging (config.json + model.safetensors with
the base weights + adapter_model.safetensors + adapter_config.json);
MERGED_DIR the same training state saved with the adapter merged
(COL_SAVE_MERGE_LORA, colossal-finetune --merge-lora). PEFT loads the adapter
onto the base model; its logits must match the merged export's, and PEFT's own
merge_and_unload() weights must match the merged model.safetensors. Exits
non-zero on any mismatch. Needs peft (requirements.txt)."""
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def nmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b) ** 2).sum() / ((b**2).sum() + 1e-30))


def main() -> int:
    adapter_dir, merged_dir = sys.argv[1], sys.argv[2]
    base = AutoModelForCausalLM.from_pretrained(adapter_dir, torch_dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, adapter_dir)
    peft_model.eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, torch_dtype=torch.float32)
    merged.eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, merged.config.vocab_size, (2, 12), generator=gen)
    with torch.no_grad():
        lp = peft_model(ids).logits
        lm = merged(ids).logits
    with peft_model.disable_adapter(), torch.no_grad():
        plain = peft_model(ids).logits
    e_logits = nmse(lp, lm)
    moved = nmse(plain, lm)
    ok = e_logits <= 1e-10 and moved > 1e-8
    print(f"{adapter_dir}: PEFT {type(peft_model.get_base_model()).__name__} + adapter vs merged export: "
          f"logits NMSE {e_logits:.2e} (the adapter moves the logits by NMSE {moved:.2e})")
    # PEFT's own merge against colossal's merged weights
    want = peft_model.merge_and_unload().state_dict()
    got = load_file(f"{merged_dir}/model.safetensors")
    worst = 0.0
    for name, t in got.items():
        if name not in want:
            print(f"{merged_dir}: {name} is not a parameter of the PEFT-merged model")
            ok = False
            continue
        worst = max(worst, float((t - want[name]).abs().max() / (want[name].abs().max() + 1e-30)))
    print(f"{merged_dir}: {len(got)} tensors; largest difference from PEFT's merge_and_unload {worst:.2e} (relative)")
    ok = ok and worst <= 1e-5
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Check that TensorBoard reads the event files colossal-finetune --tensorboard writes, with the values of the
run's metrics.jsonl: check_tensorboard.py OUT

OUT is a colossal-finetune output directory written with --tensorboard: OUT/runs/events.out.tfevents.* are
loaded with TensorBoard's own EventAccumulator (the reader behind `tensorboard --logdir`, which also checks
each record's CRCs), and every scalar (train/loss, train/learning_rate, train/grad_norm, train/tokens_per_s,
eval/loss) is compared with OUT/metrics.jsonl at each step (float32 values). A resumed run has several event
files; TensorBoard keeps each step once (a SessionLog START drops the later steps of the earlier files), and
so must the comparison. Needs `pip install tensorboard` (no TensorFlow). Exits non-zero on any mismatch."""
import json
import os
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def main() -> int:
    out = sys.argv[1]
    acc = EventAccumulator(os.path.join(out, "runs"), size_guidance={"scalars": 0})
    acc.Reload()
    want = {"train/loss": {}, "train/learning_rate": {}, "train/grad_norm": {}, "train/tokens_per_s": {},
            "eval/loss": {}}
    keys = {"train/loss": "loss", "train/learning_rate": "lr", "train/grad_norm": "grad_norm",
            "train/tokens_per_s": "tokens_per_s", "eval/loss": "eval_loss"}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            for tag, key in keys.items():
                if rec.get(key) is not None:
                    want[tag][rec["step"]] = rec[key]
    tags = acc.Tags()["scalars"]
    bad = 0
    for tag, steps in want.items():
        if tag not in tags:
            print(f"{tag}: not in the event files (tags: {tags})")
            bad += 1
            continue
        got = {e.step: e.value for e in acc.Scalars(tag)}
        if sorted(got) != sorted(steps):
            print(f"{tag}: steps {sorted(got)[:5]}... in TensorBoard, {sorted(steps)[:5]}... in metrics.jsonl "
                  f"({len(got)} and {len(steps)})")
            bad += 1
            continue
        # metrics.jsonl holds the shortest text of each float: it gives back the float TensorBoard holds
        off = [s for s in steps if f32(steps[s]) != f32(got[s])]
        if off:
            s = off[0]
            print(f"{tag}: {len(off)} values differ, e.g. step {s}: {got[s]} vs {steps[s]}")
            bad += 1
        else:
            print(f"ok {tag}: {len(got)} steps ({min(got)}..{max(got)}) as in metrics.jsonl")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

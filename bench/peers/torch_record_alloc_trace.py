"""Records the device allocations of a real PyTorch workload, so that cube's pools can replay
them (bench_alloc_churn --replay FILE) beside PyTorch's own figures on the same workload.

    python3 torch_record_alloc_trace.py OUT.trace [STEPS=3]
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_record_alloc_trace.py - [STEPS]

The workload: training steps of a transformer encoder language model in fp32 on CUDA (6
layers, width 512, 8 heads, feed-forward 2048, batch 16, sequence 256, vocabulary 8192,
AdamW), model and optimizer made while recording, so every allocation of the run is in the
trace. PyTorch's allocator history (torch.cuda.memory._record_memory_history) gives each
block's alloc and free in order; the file has one line per event:
    a SLOT SIZE      allocate SIZE bytes (the block's size) into SLOT
    f SLOT           free the block in SLOT
after '#' comment lines that say what was recorded. It prints PyTorch's own peak bytes in
use (max_memory_allocated) and peak reserved (max_memory_reserved) for the run and their
ratio; with OUT '-' it writes no file (for the run with other allocator settings).
"""
import os
import sys

import torch
import torch.nn as nn

out = sys.argv[1] if len(sys.argv) > 1 else "-"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
torch.manual_seed(0)
dev = "cuda"
torch.cuda.memory._record_memory_history(max_entries=1000000)

V, D, H, F, L, B, S = 8192, 512, 8, 2048, 6, 16, 256


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(S, D))
        layer = nn.TransformerEncoderLayer(D, H, F, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.head = nn.Linear(D, V)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(S, device=x.device)
        return self.head(self.enc(self.emb(x) + self.pos, mask=mask, is_causal=True))


model = LM().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _ in range(steps):
    x = torch.randint(0, V, (B, S), device=dev)
    y = torch.randint(0, V, (B, S), device=dev)
    loss = nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
peak_in, peak_res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)

events = []
slot_of, free_slots, next_slot, allocs = {}, [], 0, 0
for e in snap["device_traces"][0]:
    act, addr = e["action"], e["addr"]
    if act == "alloc":
        if free_slots:
            s = free_slots.pop()
        else:
            s, next_slot = next_slot, next_slot + 1
        slot_of[addr] = s
        events.append("a %d %d" % (s, e["size"]))
        allocs += 1
    elif act in ("free_requested", "free_completed") and addr in slot_of:
        s = slot_of.pop(addr)
        free_slots.append(s)
        events.append("f %d" % s)

conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
print("workload: %d training steps of a transformer LM (layers %d, width %d, heads %d, ff %d, "
      "batch %d, seq %d, vocab %d), fp32, AdamW; torch %s; PYTORCH_CUDA_ALLOC_CONF=%r"
      % (steps, L, D, H, F, B, S, V, torch.__version__, conf))
print("events: %d (%d allocations, %d slots)" % (len(events), allocs, next_slot))
print("pytorch: peak in use %.1f MiB, peak reserved %.1f MiB, reserved/peak %.3f"
      % (peak_in / 2**20, peak_res / 2**20, peak_res / peak_in))
if out != "-":
    with open(out, "w") as f:
        f.write("# allocations of %d training steps of a transformer LM on CUDA, recorded with "
                "torch.cuda.memory._record_memory_history (bench/peers/torch_record_alloc_trace.py)\n"
                % steps)
        f.write("# layers %d, width %d, heads %d, ff %d, batch %d, seq %d, vocab %d, fp32, AdamW; "
                "torch %s on %s\n" % (L, D, H, F, B, S, V, torch.__version__,
                                       torch.cuda.get_device_name(0)))
        f.write("# pytorch default allocator: peak in use %d B, peak reserved %d B\n"
                % (peak_in, peak_res))
        f.write("# slots %d\n" % next_slot)
        f.write("\n".join(events) + "\n")

"""scaled_dot_product_attention forward + backward at seq 1024 (batch 4,
8 heads, head dim 64), causal and not, float32 (DEFAULT precision) and
bfloat16, on "tpu" against CPU PyTorch's SDPA (its flash-attention kernel) in one run.
Target (issue 4): tpu >= 1.0x CPU SDPA."""

import warnings

import torch
import torch.nn.functional as F

import vtpu
from common import best_time, save

B, H, L, D = 4, 8, 1024, 64


def fwd_bwd(q, k, v, do, causal):
    def run():
        for t in (q, k, v):
            t.grad = None
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.backward(do)
        return q.grad

    return run


def main():
    warnings.simplefilter("ignore")
    print(f"ISA path {vtpu.info()['isa_path']}, {torch.get_num_threads()} threads")
    g = torch.Generator().manual_seed(0)
    base = [torch.randn(B, H, L, D, generator=g) for _ in range(4)]
    rows, bars = {}, {}
    for dtype in (torch.float32, torch.bfloat16):
        for causal in (False, True):
            cq, ck, cv = (t.to(dtype).clone().requires_grad_() for t in base[:3])
            cdo = base[3].to(dtype)
            tq, tk, tv = (t.detach().to(dtype).to("tpu").requires_grad_() for t in base[:3])
            tdo = base[3].to(dtype).to("tpu")
            cpu = best_time(fwd_bwd(cq, ck, cv, cdo, causal), repeat=3)
            tpu_run = fwd_bwd(tq, tk, tv, tdo, causal)
            vtpu.reset_fallback_report()
            tpu = best_time(lambda: tpu_run().cpu(), repeat=3)
            fb = vtpu.fallback_report()
            name = f"{str(dtype).replace('torch.', '')} {'causal' if causal else 'full'}"
            rows[name] = {"cpu_ms": cpu * 1e3, "tpu_ms": tpu * 1e3, "vs_cpu": cpu / tpu, "fallbacks": fb}
            bars[f"{name} cpu"] = cpu * 1e3
            bars[f"{name} tpu"] = tpu * 1e3
            print(f"SDPA fwd+bwd {name:16s}: CPU {cpu * 1e3:7.1f} ms, tpu {tpu * 1e3:7.1f} ms -> "
                  f"{cpu / tpu:.2f}x CPU SDPA (target >= 1.0x){'  fallbacks: ' + str(fb) if fb else ''}")
    save("attention", {"shape": [B, H, L, D], "rows": rows}, bars)


if __name__ == "__main__":
    main()

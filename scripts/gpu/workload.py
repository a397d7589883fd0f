"""PyTorch workloads for scripts/gpu-e2e.sh (one GPU, several "nodes").

  train SECS CTL   4096x4096 f32 matmul steps (a @ b, then torch.cuda.synchronize()) for
                   SECS seconds. Control files in directory CTL, read every step:
                     CTL/stall_ms  a float: host sleep per step (a data-loader stall)
                     CTL/pause     while it exists: no GPU work at all (a stopped node)
                   Prints one JSON line per second: {"t": unix, "steps_per_s": x}.
  contend SECS     back-to-back matmuls on the same GPU for SECS (another process's load)
  tiny N           N tiny launches (x.add_(1) on 256 floats); prints {"ns_per_launch": x}
  step matmul N    N matmul steps; prints {"ms_per_step": x}
  step transformer N
                   N training steps of a small transformer (many small kernels, AdamW);
                   prints {"ms_per_step": x}

Needs torch with CUDA; nothing here runs without a GPU.
"""
import json
import os
import sys
import time


def train(secs, ctl):
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    end = time.time() + secs
    last, steps = time.time(), 0
    stall_path = os.path.join(ctl, "stall_ms")
    pause_path = os.path.join(ctl, "pause")
    while time.time() < end:
        if os.path.exists(pause_path):
            time.sleep(0.05)
        else:
            c = a @ b
            torch.cuda.synchronize()
            del c
            steps += 1
            try:
                with open(stall_path) as f:
                    stall = float(f.read().strip() or 0)
            except (OSError, ValueError):
                stall = 0.0
            if stall > 0:
                time.sleep(stall / 1000.0)
        now = time.time()
        if now - last >= 1.0:
            print(json.dumps({"t": round(now, 3), "steps_per_s": round(steps / (now - last), 2)}), flush=True)
            last, steps = now, 0


def contend(secs):
    import torch

    a = torch.randn(8192, 8192, device="cuda")
    end = time.time() + secs
    while time.time() < end:
        a @ a
        torch.cuda.synchronize()


def tiny(n):
    import torch

    x = torch.ones(256, device="cuda")
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(n):
        x.add_(1)
        if i % 1000 == 999:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(json.dumps({"launches": n, "ns_per_launch": round(dt / n * 1e9, 1)}), flush=True)


def step_time(kind, n):
    import torch

    if kind == "matmul":
        a = torch.randn(4096, 4096, device="cuda")
        b = torch.randn(4096, 4096, device="cuda")

        def step():
            a @ b
            torch.cuda.synchronize()
    elif kind == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=512, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=4).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(16, 64, 256, device="cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
    else:
        sys.exit(f"unknown step kind {kind!r}")
    for _ in range(20):
        step()
    t = time.perf_counter()
    for _ in range(n):
        step()
    dt = time.perf_counter() - t
    print(json.dumps({"kind": kind, "steps": n, "ms_per_step": round(dt / n * 1e3, 4)}), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "train":
        train(float(sys.argv[2]), sys.argv[3])
    elif mode == "contend":
        contend(float(sys.argv[2]))
    elif mode == "tiny":
        tiny(int(sys.argv[2]))
    elif mode == "step":
        step_time(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"unknown mode {mode!r}")

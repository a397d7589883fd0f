"""One layer's workload for scripts/gpu/layers.py.

  layer_workload.py LAYER N

Initialises CUDA and the layer, warms up, prints "ready" and waits for "go" on stdin; then
runs N operations of the layer, synchronises, prints {"seconds": x, "kernels_per_op": k}
and waits for "exit". LAYER is one of:

  eager   x.add_(1) on 256 floats (PyTorch's own kernel through the CUDA runtime)
  cublas  a 512x512 f32 matmul (cuBLAS)
  cudnn   a 3x3 convolution, 8x64x56x56 (cuDNN)
  triton  a Triton add kernel (Triton launches through the driver)
  graph   a CUDA graph of 10 add_ kernels replayed (cudaGraphLaunch)
  nccl    all_reduce of 1 MiB in a one-rank NCCL group
  nccl_item  the same, then `.item()` of one element (the barrier wait of a training step)
"""
import json
import os
import socket
import sys
import time


def build(layer):
    import torch

    if layer == "eager":
        x = torch.ones(256, device="cuda")
        return (lambda: x.add_(1)), 1
    if layer == "cublas":
        a = torch.randn(512, 512, device="cuda")
        b = torch.randn(512, 512, device="cuda")
        return (lambda: a @ b), None
    if layer == "cudnn":
        torch.backends.cudnn.benchmark = False
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
        x = torch.randn(8, 64, 56, 56, device="cuda")

        def op():
            with torch.no_grad():
                conv(x)
        return op, None
    if layer == "triton":
        import triton
        import triton.language as tl

        @triton.jit
        def add(x_ptr, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = i < n
            tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)

        x = torch.ones(4096, device="cuda")
        return (lambda: add[(4,)](x, 4096, BLOCK=1024)), 1
    if layer == "graph":
        x = torch.ones(256, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                x.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10):
                x.add_(1)
        return g.replay, 10
    if layer in ("nccl", "nccl_item"):
        import torch.distributed as dist

        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        # A machine without a network: NCCL's bootstrap must use loopback.
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        t = torch.ones(256 * 1024, device="cuda")
        if layer == "nccl_item":
            # As a training step waits for its gradients: the host blocks at the next
            # `.item()`, a synchronize of the compute stream, never of NCCL's.
            return (lambda: (dist.all_reduce(t), t[0].item())), None
        return (lambda: dist.all_reduce(t)), None
    sys.exit(f"unknown layer {layer!r}")


def main():
    import torch

    layer, n = sys.argv[1], int(sys.argv[2])
    op, kernels = build(layer)
    for _ in range(50):
        op()
    torch.cuda.synchronize()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    t = time.perf_counter()
    for i in range(n):
        op()
        if i % 500 == 499:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print(json.dumps({"seconds": round(time.perf_counter() - t, 4), "kernels_per_op": kernels}), flush=True)
    sys.stdin.readline()
    if layer in ("nccl", "nccl_item"):
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A PyTorch training loop for scripts/gpu/why.sh (one GPU).

  train CPU SECS CTL   a small transformer trained with AdamW on random tokens; each step
                       ends with loss.item() (the host waits for the GPU there, as real
                       loops do for logging). The process pins itself to CPU at nice -20
                       (root), so the rest of the machine barely touches that CPU.
                       While CTL/write exists, each step also writes 256 KiB blocks with
                       O_DIRECT | O_DSYNC to CTL/ckpt.bin for about as long as the rest of
                       the step took (a synchronous checkpoint or log write in the loop).
                       Prints "started" once warmed up, then {"t", "steps_per_s"} lines.
  hog CPU SECS         spins on CPU at nice -20 for SECS (a CPU hog beside the trainer).

Needs torch with CUDA for `train`; `hog` needs only Python.
"""
import json
import mmap
import os
import sys
import time

WRITE_BYTES = 256 << 10
MIN_WRITES, MAX_WRITES = 4, 256


def pin(cpu):
    os.sched_setaffinity(0, {cpu})
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
    except PermissionError:
        pass


def hog(cpu, secs):
    pin(cpu)
    print("started", flush=True)
    end = time.time() + secs
    x = 0
    while time.time() < end:
        for i in range(100000):
            x += i


def open_ckpt(path):
    """O_DIRECT | O_DSYNC where the filesystem allows O_DIRECT, else O_DSYNC alone."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DSYNC
    try:
        return os.open(path, flags | os.O_DIRECT, 0o600)
    except OSError:
        return os.open(path, flags, 0o600)


def train(cpu, secs, ctl):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    pin(cpu)
    torch.set_num_threads(1)
    dev = "cuda"
    vocab, d, seq, batch = 8192, 512, 256, 16
    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, d),
        torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True), num_layers=4
        ),
        torch.nn.Linear(d, vocab),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randint(0, vocab, (batch, seq), device=dev)
    y = torch.randint(0, vocab, (batch, seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = loss_fn(out.view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(5):
        step()
    buf = mmap.mmap(-1, WRITE_BYTES)  # page-aligned, as O_DIRECT needs
    buf.write(b"\x5a" * WRITE_BYTES)
    write_flag = os.path.join(ctl, "write")
    fd, off = None, 0
    print("started", flush=True)
    end = time.time() + secs
    last, steps = time.time(), 0
    while time.time() < end:
        t0 = time.time()
        step()
        if os.path.exists(write_flag):
            if fd is None:
                fd = open_ckpt(os.path.join(ctl, "ckpt.bin"))
            w0 = time.time()
            busy = w0 - t0
            i = 0
            while i < MAX_WRITES and (i < MIN_WRITES or time.time() - w0 < busy):
                os.pwrite(fd, buf, off)
                off = (off + WRITE_BYTES) % (64 << 20)
                i += 1
        steps += 1
        now = time.time()
        if now - last >= 1.0:
            print(json.dumps({"t": round(now, 3), "steps_per_s": round(steps / (now - last), 2)}), flush=True)
            last, steps = now, 0


def main(argv):
    if len(argv) >= 4 and argv[0] == "train":
        train(int(argv[1]), float(argv[2]), argv[3])
    elif len(argv) >= 3 and argv[0] == "hog":
        hog(int(argv[1]), float(argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

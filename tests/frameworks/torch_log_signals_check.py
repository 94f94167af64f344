"""The allocation log truncated under a PyTorch program that handles SIGBUS itself.

Run under the shim with a log (GPUMEM_LOG_FILE) and PyTorch's cache off, so every
tensor is a logged cudaMalloc/cudaFree. The program allocates, then, as the mode
says, either enables Python's faulthandler (which installs a SIGBUS handler that
ends the process on any fault: programs and test runners enable it after startup)
or blocks SIGBUS in its thread (as a server's worker thread blocks every signal),
empties the log as logrotate's copytruncate would, and allocates again.

The log must not end the program: it prints "TORCH-LOG-SIGNALS ok <mode> ..."
and exits 0. It also checks that the program still reads back its own SIGBUS
disposition and mask.

Usage: torch_log_signals_check.py faulthandler|blocked LOG_PATH"""
import faulthandler
import signal
import sys

import torch


def tensors(n):
    total = 0.0
    for i in range(n):
        t = torch.full((1024 + i % 7,), float(i), device="cuda")
        total += float(t[0])
    return total


def main():
    mode, log = sys.argv[1], sys.argv[2]
    tensors(200)  # the log and its guard exist from the first allocation
    if mode == "faulthandler":
        faulthandler.enable()
    elif mode == "blocked":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGBUS})
    else:
        sys.exit(f"unknown mode {mode}")
    with open(log, "w"):
        pass  # ": > log", copytruncate
    total = tensors(2000)
    torch.cuda.synchronize()
    if mode == "blocked":
        still = signal.SIGBUS in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert still, "SIGBUS is no longer blocked"
    print(f"TORCH-LOG-SIGNALS ok {mode} total={total:.0f} faulthandler={faulthandler.is_enabled()}", flush=True)


if __name__ == "__main__":
    main()

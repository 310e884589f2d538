"""Instructions per cycle, per thread, counted by valgrind: a figure the machine's load does not move.

    python bench/instructions.py [--store sqlite|postgresql|floor] [--cycles 40,140]

bench/cost.py's server and client (one agent looping create -> answer -> wait) with nothing counted
inside (no cProfile, no statement trace) run twice under ``valgrind --tool=callgrind
--separate-threads=yes``, for the two numbers of cycles; the difference of each thread's instruction
count over the difference of cycles is that thread's work per cycle, start-up and migrations cancelled
out. Threads in the order they start: the server's event loop (this process's main thread), on
SQLite the database thread (core/store/sqlite.py), then the others: the client (the busiest of them)
and threads that do little a cycle (uvloop's libuv workers, a resolver's executor). The server runs on
the event loop ``handraise serve`` runs (bench/cost.py ``run_as_served``). User-space instructions only: the kernel's part (system calls, wake-ups)
is not in them, and valgrind's CPU has no SHA extensions, so hashing counts more than on the
machine. About two minutes a store; needs valgrind (Debian package ``valgrind``).
"""

from __future__ import annotations

import argparse
import glob
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def _inner(store: str, cycles: int) -> None:
    sys.path.insert(0, str(BENCH))
    import cost

    cost.run_as_served(cost.measure(store, cycles=cycles, warmup=10, profile=0, counted=False))


def _thread_totals(store: str, cycles: int, folder: str) -> dict[int, int]:
    prefix = f"{folder}/cg.{cycles}"
    subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}.%p",
                    "--dump-instr=no", "--collect-jumps=no", sys.executable, __file__, "--inner",
                    "--store", store, "--cycles", str(cycles)],
                   check=True, cwd=BENCH.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    totals: dict[int, int] = {}
    for path in glob.glob(f"{prefix}.*-*"):
        thread = int(path.rsplit("-", 1)[1])
        found = re.search(r"^totals: (\d+)", Path(path).read_text(), re.MULTILINE)
        if found:
            totals[thread] = int(found.group(1))
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgresql", "floor"], default="sqlite")
    parser.add_argument("--cycles", default="40,140", help="the two runs' numbers of cycles")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        _inner(args.store, int(args.cycles))
        return 0
    few, many = (int(n) for n in args.cycles.split(","))
    with tempfile.TemporaryDirectory() as folder:
        a, b = _thread_totals(args.store, few, folder), _thread_totals(args.store, many, folder)
    per = {t: (v - a.get(t, 0)) / (many - few) for t, v in b.items()}
    server_threads = ["server loop", "database thread"] if args.store == "sqlite" else ["server loop"]
    # The rest: the client, the busiest of them, and threads that work little a cycle (uvloop's libuv workers,
    # started with the server's site before the client; a resolver's executor).
    rest = [t for t in per if t > len(server_threads)]
    client = max(rest, key=lambda t: per[t]) if rest else None
    print(f"{args.store}: instructions per cycle (create -> answer -> wait), runs of {few} and {many} cycles")
    for thread in sorted(per):
        role = (server_threads[thread - 1] if thread <= len(server_threads)
                else "client" if thread == client else "other")
        print(f"  thread {thread} ({role}): {per[thread] / 1e6:.3f} M")
    server = sum(per[t] for t in per if t <= len(server_threads))
    print(f"  server ({' and '.join(server_threads)}): {server / 1e6:.3f} M")
    return 0


if __name__ == "__main__":
    sys.exit(main())

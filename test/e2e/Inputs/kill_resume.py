"""kill -9 of a whole tensor-parallel run (launcher, mpirun and ranks) at
arbitrary moments while it checkpoints every step; each time the resumed run
must end bit-identical to the uninterrupted one.

Usage: kill_resume.py CLEAVE BUNDLE TEXT WORK STEPS DELAY...
"""
import os
import shutil
import signal
import subprocess
import sys
import time

cleave, bundle, text, work, steps = sys.argv[1:6]
steps = int(steps)
delays = [float(d) for d in sys.argv[6:]]
feed = ["--text", text, "--shuffle", "--seed", "5", "--progress", "lines"]
full = os.path.join(work, "full")
subprocess.run([cleave, "run", bundle, *feed, "--steps", str(steps), "--dump", full],
               check=True, stdout=subprocess.DEVNULL)
here = os.path.dirname(os.path.abspath(__file__))
for i, delay in enumerate(delays):
    ck = os.path.join(work, f"ck{i}")
    shutil.rmtree(ck, ignore_errors=True)
    p = subprocess.Popen([cleave, "run", bundle, *feed, "--steps", str(steps),
                          "--checkpoint", ck, "--save-every", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    time.sleep(delay)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    # No rank may outlive the run (it would go on writing checkpoints): the
    # ranks die with mpirun, a moment after it.

    def survivors():
        found = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if ck.encode() in f.read():
                        found.append(pid)
            except (OSError, ValueError):
                pass
        return found
    # With their launcher gone, Open MPI's ranks notice only after about a
    # second (and write checkpoints meanwhile); Cleave's die at once.
    time.sleep(0.5)
    if survivors():
        sys.exit(f"kill after {delay} s: ranks kept running after the kill")
    before = sorted(os.listdir(ck)) if os.path.isdir(ck) else []
    done = sorted(d for d in before if d.startswith("step-"))
    if not done:
        print(f"kill after {delay} s: before the first checkpoint")
        continue
    last = int(done[-1][5:])
    if last >= steps:
        print(f"kill after {delay} s: the run had finished")
        continue
    out = os.path.join(work, f"resumed{i}")
    subprocess.run([cleave, "run", bundle, *feed, "--steps", str(steps - last),
                    "--resume", ck, "--dump", out], check=True, stdout=subprocess.DEVNULL)
    r = subprocess.run([sys.executable, os.path.join(here, "same_run.py"), full, out, "--tail"],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"kill after {delay} s (resumed at step {last}): {r.stdout}{r.stderr}")
    leftovers = [d for d in os.listdir(ck) if d.startswith(".tmp-")]
    print(f"kill after {delay} s: resumed at step {last}, bit-identical"
          f"{' (a half-written checkpoint was left: ' + leftovers[0] + ')' if leftovers else ''}")

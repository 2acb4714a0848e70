"""The GPU check of mesh (tests/gpu/run.sh starts it; docs/gpu.md).

Runs meshd with the CUDA worker and the PyTorch worker on this machine's
GPU 0 and writes a table of what it measured to the file named by argv[1]:
cold starts (next to `import torch` alone), 1,000 calls, a 2,000-chunk job,
VRAM back to the baseline after a REAP, after a crash mid-call and after a
kill -9 of meshd mid-job (and how long it took), and two workers under MPS.

Exit: 0 every check passed; 1 a check failed; 77 no GPU here (meshd says
"gpu: none"); 2 usage or setup.  RUN_GPU_FAKE=1 runs the same steps with
the fake NVML and tests/workers/gpu_worker (plumbing only: nothing of it
is a GPU measurement).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from mesh.client import Client, MeshError

NO_GPU = 77
MIB = 1 << 20
FAKE = os.environ.get("RUN_GPU_FAKE") == "1"
BIN = os.environ["RUN_GPU_BIN"]                  # mesh, meshd
CUDA_WORKER = os.environ["RUN_GPU_CUDA_WORKER"]  # cuda_worker (or gpu_worker when FAKE)
TORCH_WORKER = os.environ.get("RUN_GPU_TORCH_WORKER", "")
PYTHON = os.environ.get("RUN_GPU_PYTHON", sys.executable)
DEADLINE = time.monotonic() + float(os.environ.get("RUN_GPU_BUDGET_S", "330"))
GRACE_MS = 5000   # meshd's memory-back grace (MESH_GPU_GRACE_MS)
SLACK = 16 * MIB  # "back to baseline": within this of it
MODEL = 1 << 30   # the CUDA worker's "model"
rows = []
failed = [0]


def say(*a):
    print("run.sh:", *a, flush=True)


def row(check, ok, measured, target=""):
    rows.append((check, "ok" if ok is True else "FAIL" if ok is False else ok, measured, target))
    if ok is False:
        failed[0] += 1
    say("%-48s %-8s %s" % (check, rows[-1][1], measured))


def left():
    return DEADLINE - time.monotonic()


class Meshd:
    def __init__(self, work, name, isolation="none", env=None, state=None):
        self.sock = os.path.join(work, name + ".sock")
        self.err = open(os.path.join(work, name + ".err"), "ab")
        e = dict(os.environ, MESH_GPU_GRACE_MS=str(GRACE_MS), **(env or {}))
        # Its own job state (never the machine's ~/.local/state/mesh).
        state = state or os.path.join(work, name + ".state")
        self.p = subprocess.Popen([os.path.join(BIN, "meshd"), "--catalog", os.path.join(work, "cat"), "--logs",
                                   os.path.join(work, "logs"), "--socket", self.sock, "--isolation", isolation,
                                   "--state", state],
                                  stdout=self.err, stderr=self.err, env=e)
        self.c = Client(self.sock, timeout=120)
        t = time.monotonic()
        while time.monotonic() - t < 20:
            try:
                self.ps()
                return
            except MeshError:
                if self.p.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError("meshd did not start (see %s.err)" % name)

    def ps(self):
        return self.c.ps()

    def gpu(self):
        return self.ps().get("gpu", {})

    def used(self):
        return self.gpu()["devices"][0]["used"]

    def worker(self, prog):
        for p in self.ps()["programs"]:
            if p["name"] == prog and p["workers"]:
                return p["workers"][0]
        return None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def kill9(self):
        self.p.kill()
        self.p.wait()


def running(pid):
    """Alive and not a zombie (a zombie holds no GPU memory)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def wait_used(read, target, timeout):
    """Polls used memory until it is within SLACK of target: seconds, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if read() <= target + SLACK:
                return time.monotonic() - t0
        except (MeshError, KeyError, IndexError):
            pass
        time.sleep(0.02)
    return None


def catalog(work, isolation_suffix=""):
    cat = os.path.join(work, "cat")
    arch = os.path.join(cat, "x86_64-linux-gnu")
    os.makedirs(arch, exist_ok=True)
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)

    def prog(name, binary, args, vram, extra=""):
        link = os.path.join(arch, name)
        if not os.path.lexists(link):
            os.symlink(binary, link)
        # meshd run as root starts a program without `user` as `nobody`,
        # who may not reach the bundle, the work dir or the Python packages
        # on a GPU machine: this check runs its workers as root, said so.
        user = 'user = "root"\n' if os.geteuid() == 0 else ""
        with open(os.path.join(cat, name + ".toml"), "w") as f:
            f.write('name = "%s"\nbackends = ["native"]\ndevice = "gpu"\nvram = "%s"\nargs = %s\n'
                    'idle_ttl = "2s"\nmax_workers = 1\n%s%s' % (name, vram, json.dumps(args), user, extra))

    if FAKE:
        cuda_args = [str(MODEL), "300"]
    else:
        cuda_args = ["1GiB"]
    prog("cuda", CUDA_WORKER, cuda_args, "2GiB", '[lifecycle]\nready_timeout = "60s"\n')
    prog("cuda_a", CUDA_WORKER, cuda_args[:1] if not FAKE else cuda_args, "2GiB")
    prog("cuda_b", CUDA_WORKER, cuda_args[:1] if not FAKE else cuda_args, "2GiB")
    if TORCH_WORKER:
        prog("torch", PYTHON, [TORCH_WORKER], "6GiB", '[lifecycle]\nready_timeout = "180s"\n')


def expect_reply(req, rep):
    return rep == req if FAKE else rep == bytes((b + 1) & 0xFF for b in req)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0


def step_calls(d):
    lat = []
    bad = 0
    for i in range(1000):
        req = b"mesh %04d" % i
        t = time.monotonic()
        rep = d.c.call("cuda", req)
        lat.append(time.monotonic() - t)
        bad += not expect_reply(req, rep)
    row("1000 calls to the CUDA worker", bad == 0,
        "%d wrong replies; p50 %.2f ms, p99 %.2f ms" % (bad, pct(lat, .5) * 1e3, pct(lat, .99) * 1e3))


def step_job(d):
    mesh = os.path.join(BIN, "mesh")
    h = subprocess.run([mesh, "help"], capture_output=True, text=True)
    if not any(line.split()[:1] == ["submit"] for line in h.stdout.splitlines()):
        row("2000-chunk job (mesh submit, mesh wait)", "skipped", "this mesh has no `submit` (jobs not merged)")
        return
    t = time.monotonic()
    s = subprocess.run([mesh, "submit", "cuda", "--chunks", "2000", "--socket", d.sock], capture_output=True,
                       text=True, timeout=max(10, left() - 120))
    job = (s.stdout.split() or ["?"])[-1]
    w = subprocess.run([mesh, "wait", job, "--socket", d.sock], capture_output=True, text=True,
                       timeout=max(10, left() - 100))
    row("2000-chunk job (mesh submit, mesh wait)", s.returncode == 0 and w.returncode == 0,
        "%.2f s; submit exit %d, wait exit %d %s" % (time.monotonic() - t, s.returncode, w.returncode,
                                                     (w.stdout + w.stderr).strip()[-120:]))


def freed_ms(d, prog):
    w = d.worker(prog)
    g = (w or {}).get("gpu") or {}
    return g.get("time_to_free_ms") if g.get("time_to_free_ms") is not None else g.get("last_time_to_free_ms")


def step_reap(d, base, prog, label):
    """The idle TTL (2 s) REAPs the worker: its memory back to baseline."""
    w = d.worker(prog)
    pid = w and w["pid"]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30 and d.worker(prog) and d.worker(prog)["pid"]:
        time.sleep(0.05)
    reaped = time.monotonic()
    back = wait_used(d.used, base, GRACE_MS / 1000 + 5)
    ttf = None
    t1 = time.monotonic()
    while ttf is None and time.monotonic() - t1 < GRACE_MS / 1000 + 2:
        ttf = freed_ms(d, prog)
        time.sleep(0.05)
    row("%s: REAP (idle 2 s), VRAM back to baseline" % label,
        back is not None and back <= GRACE_MS / 1000 + 1,
        "pid %s reaped %.1f s after the last call (idle_ttl 2 s); used back %s after the reap; meshd's "
        "time_to_free %s ms" % (pid, reaped - t0, "%.0f ms" % (back * 1e3) if back is not None else "NEVER", ttf),
        "grace + 1 s")


def step_crash(d, base):
    d.c.call("cuda", b"warm")
    t = time.monotonic()
    try:
        d.c.call("cuda", b"crash")
        ok = False
        how = "no error"
    except MeshError as e:
        ok = e.code == "E_CRASHED"
        how = e.code
    back = wait_used(d.used, base, GRACE_MS / 1000 + 5)
    time.sleep(0.1)
    row("CUDA worker crashes mid-call, VRAM back", ok and back is not None and back <= GRACE_MS / 1000 + 1,
        "call answered %s after %.0f ms; used back %s after the answer; time_to_free %s ms" %
        (how, (time.monotonic() - t) * 1e3, "%.0f ms" % (back * 1e3) if back is not None else "NEVER",
         freed_ms(d, "cuda")), "grace + 1 s")


def step_kill9(work, d, base):
    """kill -9 of meshd with a call in flight: its workers die by
    PDEATHSIG; a new meshd sees the memory come back (and places nothing on
    it meanwhile)."""
    d.c.call("cuda", b"warm")
    pid = d.worker("cuda")["pid"]
    res = {}

    def long_call():
        try:
            res["r"] = d.c.call("cuda", b"spin 5000" if not FAKE else b"x")
        except MeshError as e:
            res["e"] = e.code

    th = threading.Thread(target=long_call)
    th.start()
    time.sleep(0.5)
    t = time.monotonic()
    d.kill9()
    th.join(10)
    d2 = Meshd(work, "meshd2")
    w0 = time.monotonic()
    back = wait_used(d2.used, base, GRACE_MS / 1000 + 10)
    total = (w0 - t) + back if back is not None else None
    gone = not running(pid)
    row("kill -9 of meshd mid-call, VRAM back (seen by a new meshd)",
        gone and total is not None and total <= GRACE_MS / 1000 + 1,
        "worker pid %d %s; the call got %s; used back %s after the kill (new meshd up in %.0f ms)" %
        (pid, "gone" if gone else "STILL ALIVE", res.get("e", "a reply" if "r" in res else "nothing"),
         "%.0f ms" % (total * 1e3) if total is not None else "NEVER", (w0 - t) * 1e3), "grace + 1 s")
    return d2


def step_kill9_job(work, base):
    """kill -9 of meshd mid-job: its workers die with it; a meshd on
    another state directory watches the VRAM come back; then a meshd on the
    job's state resumes the job and finishes it."""
    mesh = os.path.join(BIN, "mesh")
    jobstate = os.path.join(work, "job.state")
    n = 20000
    d = Meshd(work, "meshd-job", state=jobstate)
    try:
        s = subprocess.run([mesh, "submit", "cuda", "--chunks", str(n), "--socket", d.sock], capture_output=True,
                           text=True, timeout=30)
        job = s.stdout.strip()
        if s.returncode != 0 or not job:
            raise RuntimeError("mesh submit: exit %d %s" % (s.returncode, s.stderr.strip()[-200:]))
        t0 = time.monotonic()
        done = 0
        while time.monotonic() - t0 < 60:
            done = d.c.job(job).status().get("done", 0)
            if done >= n // 10:
                break
            time.sleep(0.02)
        w = d.worker("cuda")
        pid = w and w["pid"]
    except BaseException:
        d.stop()
        raise
    t = time.monotonic()
    d.kill9()
    look = Meshd(work, "meshd-look")
    w0 = time.monotonic()
    back = wait_used(look.used, base, GRACE_MS / 1000 + 10)
    look.stop()
    total = (w0 - t) + back if back is not None else None
    gone = not pid or not running(pid)
    row("kill -9 of meshd mid-job (%d of %d chunks done), VRAM back" % (done, n),
        gone and total is not None and total <= GRACE_MS / 1000 + 1,
        "worker pid %s %s; used back %s after the kill" %
        (pid, "gone" if gone else "STILL ALIVE", "%.0f ms" % (total * 1e3) if total is not None else "NEVER"),
        "grace + 1 s")
    d3 = Meshd(work, "meshd-resume", state=jobstate)
    try:
        t = time.monotonic()
        r = subprocess.run([mesh, "wait", job, "--quiet", "--socket", d3.sock], capture_output=True, text=True,
                           timeout=max(10, left() - 60))
        info = d3.c.job(job).status()
        row("the job resumed by a new meshd", r.returncode == 0 and info.get("done") == n,
            "wait exit %d after %.2f s; done %s of %d, buried %s, duplicates %s" %
            (r.returncode, time.monotonic() - t, info.get("done"), n, info.get("buried"), info.get("duplicates")))
    finally:
        d3.stop()


def step_mps(work, base):
    tool = shutil.which("nvidia-cuda-mps-control")
    if FAKE or not tool:
        row("two workers under MPS", "skipped", "fake run" if FAKE else "no nvidia-cuda-mps-control on PATH")
        return
    pipe = os.path.join(work, "mps")
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=pipe)
    d = None
    try:
        # meshd starts the control daemon itself (docs/gpu.md, MPS) and quits it at its exit.
        d = Meshd(work, "meshd-mps", "mps", {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": pipe})
        how = (d.gpu().get("mps") or {}).get("daemon", "?")
        t = time.monotonic()
        pids = []
        for prog in ("cuda_a", "cuda_b"):
            d.c.start(prog)
            pids.append(d.worker(prog)["pid"])
        started = time.monotonic() - t
        bad = 0
        for i in range(100):
            for prog in ("cuda_a", "cuda_b"):
                bad += not expect_reply(b"m%d" % i, d.c.call(prog, b"m%d" % i))
        servers = subprocess.run([tool], input="get_server_list\n", env=env, capture_output=True, text=True,
                                 timeout=10).stdout
        for prog in ("cuda_a", "cuda_b"):
            d.c.stop(prog)
        back = wait_used(d.used, base, GRACE_MS / 1000 + 5)
        d.stop()
        d = None
        quit_ok = not os.path.exists(os.path.join(pipe, "control"))
        row("two workers under MPS (control daemon started by meshd, NVML client check, terminate_client stop)",
            bad == 0 and back is not None and how == "started",
            "control daemon %s by meshd%s; both ready in %.2f s (pids %s; MPS servers %s); %d wrong replies of 200; "
            "used back %s after the stops"
            % (how, ", gone after meshd's exit" if quit_ok else ", its control socket still there after meshd's exit",
               started, pids, servers.split(), bad, "%.0f ms" % (back * 1e3) if back is not None else "NEVER"))
    except (MeshError, RuntimeError, subprocess.TimeoutExpired) as e:
        row("two workers under MPS", False, str(e)[:300])
    finally:
        if d:
            d.stop()
        if os.path.exists(os.path.join(pipe, "control")):
            try:
                subprocess.run([tool], input="quit\n", env=env, capture_output=True, text=True, timeout=10)
            except subprocess.TimeoutExpired:
                pass


def main():
    if len(sys.argv) != 2:
        print("usage: tests/gpu/run.sh REPORT", file=sys.stderr)
        return 2
    report = sys.argv[1]
    work = tempfile.mkdtemp(prefix="mesh-gpu-")
    catalog(work)
    d = Meshd(work, "meshd")
    g = d.gpu()
    if g.get("access") != "cuda" or not g.get("devices"):
        d.stop()
        say("no GPU: meshd says gpu: none (%s); nothing measured" % g.get("none"))
        with open(report, "w") as f:
            f.write("# mesh GPU check: NOT RUN\n\nno GPU on this machine: meshd says gpu: none (%s)\n" % g.get("none"))
        return NO_GPU
    if os.environ.get("RUN_GPU_CUDA_MISSING"):
        d.stop()
        print("run.sh: no CUDA worker at %s (nvcc missing when it was built?)" % CUDA_WORKER, file=sys.stderr)
        return 2
    dev = g["devices"][0]
    base = d.used()
    row("GPU", True, "%s (%s), %d MiB total, %d MiB used at start%s" % (dev["name"], dev["uuid"], dev["total"] >> 20,
                                                                       base >> 20, " [FAKE NVML]" if FAKE else ""))
    t = time.monotonic()
    r = subprocess.run([PYTHON, "-c", "import torch"], capture_output=True, text=True, timeout=120)
    t_import = time.monotonic() - t
    torch_ok = r.returncode == 0 and bool(TORCH_WORKER)
    row("python3 -c 'import torch' alone", r.returncode == 0 or "skipped",
        "%.2f s" % t_import if r.returncode == 0 else "no torch: " + (r.stderr.strip().splitlines() or ["?"])[-1])
    try:
        t = time.monotonic()
        d.c.start("cuda")
        row("CUDA worker cold start (spawn -> ready)", True, "%.0f ms (1 GiB model)" % ((time.monotonic() - t) * 1e3))
        w = d.worker("cuda")
        row("VRAM of the CUDA worker in ps", (w.get("gpu") or {}).get("vram", 0) >= MODEL,
            "%d MiB (worker), GPU used %d MiB" % ((w.get("gpu") or {}).get("vram", 0) >> 20, d.used() >> 20))
        step_calls(d)
        step_job(d)
        step_reap(d, base, "cuda", "CUDA worker")
        if torch_ok:
            t = time.monotonic()
            d.c.start("torch")
            cold = time.monotonic() - t
            row("PyTorch worker cold start (spawn -> ready)", True,
                "%.2f s (import torch alone: %.2f s)" % (cold, t_import))
            lat = []
            for i in range(200):
                t = time.monotonic()
                d.c.call("torch", os.urandom(3 * 224 * 224))
                lat.append(time.monotonic() - t)
            row("200 inferences on the PyTorch worker", True,
                "p50 %.2f ms, p99 %.2f ms" % (pct(lat, .5) * 1e3, pct(lat, .99) * 1e3))
        else:
            row("PyTorch worker", "skipped", "no torch in %s" % PYTHON if TORCH_WORKER else "no torch worker given")
        if torch_ok:
            step_reap(d, base, "torch", "PyTorch worker")
        step_crash(d, base)
        d = step_kill9(work, d, base)
        d.stop()
        step_kill9_job(work, base)
    except (MeshError, RuntimeError, subprocess.TimeoutExpired) as e:
        row("(the run stopped)", False, str(e)[:300])
    finally:
        d.stop()
    if left() > 30:
        step_mps(work, base)
    else:
        row("two workers under MPS", "skipped", "out of time")
    with open(report, "w") as f:
        f.write("# mesh GPU check%s\n\n| check | result | measured | target |\n|---|---|---|---|\n" %
                (" (FAKE NVML: plumbing only, no GPU measured)" if FAKE else ""))
        for r in rows:
            f.write("| %s | %s | %s | %s |\n" % tuple(" ".join(str(x).replace("|", "/").split()) for x in r))
    say("report written to %s; %d failed; logs in %s" % (report, failed[0], work))
    return 1 if failed[0] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The speed of the filesystem that holds the models (python3, standard library only, and fio, the
distribution's package): sequential reads of 1 MiB blocks, 16 in flight (how weights load), then
4 KiB random reads one at a time (their completion latency), on a test file of SIZE_MIB read over
and over for RUNTIME_S each. Prints one JSON object.

    python3 model_storage.py PATH SIZE_MIB RUNTIME_S

PATH is vllm_models_dir; where it does not exist yet (a host before its first deploy) its nearest
existing parent is measured: the filesystem the models will land on. Reads bypass the page cache
(O_DIRECT); a filesystem that refuses O_DIRECT is measured through the page cache, emptied of the
file first (fio's invalidate), and the result says so ("direct": false). The test file is removed
whatever happens; nothing else is written. The figures are judged elsewhere (llmfleet/model_storage.py).
"""

import json
import os
import shutil
import subprocess
import sys

JOBS = {
    # name: fio options (fio(1): --rw, --bs, --ioengine, --iodepth)
    "seq_read": ["--rw=read", "--bs=1M", "--ioengine=libaio", "--iodepth=16"],
    "rand_read": ["--rw=randread", "--bs=4k", "--ioengine=psync", "--iodepth=1", "--percentile_list=50:99:99.9"],
}
KEEP = ("io_bytes", "bw_bytes", "iops", "runtime", "total_ios", "clat_ns", "lat_ns")


def existing(path):
    while not os.path.isdir(path):
        path = os.path.dirname(path) or "/"
    return path


def mount_of(path):
    """(mount point, filesystem type) of the filesystem that holds path (/proc/self/mounts: the longest match)."""
    best = ("/", "unknown")
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
                    best = (point, parts[2])
    except OSError:
        pass
    return best


def fio(name, filename, size_mib, runtime_s, direct):
    args = ["fio", f"--name={name}", f"--filename={filename}", f"--size={size_mib}M", f"--runtime={runtime_s}",
            "--time_based", f"--direct={1 if direct else 0}", "--output-format=json", *JOBS[name]]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=runtime_s + 600)
    try:
        doc = json.loads(proc.stdout[proc.stdout.index("{"):])
        job = doc["jobs"][0]
    except (ValueError, KeyError, IndexError):
        return None, (proc.stderr.strip() or proc.stdout.strip() or f"fio exited {proc.returncode}")[-600:]
    if proc.returncode != 0 or job.get("error"):
        return None, (proc.stderr.strip() or f"fio job error {job.get('error')}")[-600:]
    return {"fio": doc.get("fio version"), **{k: job["read"].get(k) for k in KEEP}}, None


def main(argv):
    asked, size_mib, runtime_s = argv[1], int(argv[2]), int(argv[3])
    where = existing(asked)
    mount, fstype = mount_of(where)
    out = {"asked": asked, "path": where, "mount": mount, "fstype": fstype, "size_mib": size_mib,
           "runtime_s": runtime_s}
    if not shutil.which("fio"):
        out["error"] = "fio is not installed (the distribution's package fio)"
        out["missing"] = "fio"
        return out
    st = os.statvfs(where)
    free = st.f_bavail * st.f_frsize
    if free < (size_mib + 64) * 2**20:
        out["error"] = (f"{free // 2**20} MiB free on {mount}: the {size_mib} MiB test file does not fit "
                        "(fix: free space, or a smaller storage_fio_size_mib)")
        return out
    filename = os.path.join(where, f".llmfleet-fio-{os.getpid()}.tmp")
    out["direct"] = True
    try:
        for name in JOBS:
            result, error = fio(name, filename, size_mib, runtime_s, out["direct"])
            if result is None and out["direct"] and name == "seq_read":
                # a filesystem without O_DIRECT: through the page cache, the file dropped from it first
                out["direct"], out["direct_refused"] = False, error
                result, error = fio(name, filename, size_mib, runtime_s, False)
            if result is None:
                out["error"] = f"fio {name}: {error}"
                return out
            out["fio"] = result.pop("fio")
            out[name] = result
    except subprocess.TimeoutExpired as exc:
        out["error"] = f"fio did not finish within {exc.timeout:.0f} s"
    finally:
        try:
            os.unlink(filename)
        except OSError:
            pass
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv)))

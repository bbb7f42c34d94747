# The in-process half of mars's execution sandbox (src/eval/sandbox.rs starts it, in a network
# and PID namespace and as an unprivileged user where the machine permits). It limits itself,
# then runs program.py from its own directory, and exits 0 when the program ran to the end.
#   usage: python3 -I -B runner.py MEMORY_BYTES CPU_SECONDS PROCESSES
# MEMORY_BYTES 0: no address-space limit (macOS refuses RLIMIT_AS; sandbox.rs decides).
import os
import resource
import sys


def limit(which, value):
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError) as e:
        # A hard limit already below the value: keep the lower one.
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY and hard < value:
            resource.setrlimit(which, (hard, hard))
        else:
            print(f"sandbox: could not set limit {which}: {e}", file=sys.stderr)
            sys.exit(3)


memory, cpu, processes = (int(a) for a in sys.argv[1:4])
here = os.path.realpath(os.getcwd())
if memory > 0:
    limit(resource.RLIMIT_AS, memory)
limit(resource.RLIMIT_CPU, cpu)
limit(resource.RLIMIT_CORE, 0)
limit(resource.RLIMIT_NPROC, processes)
limit(resource.RLIMIT_FSIZE, 16 << 20)
limit(resource.RLIMIT_NOFILE, 64)

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def inside(path):
    try:
        p = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return p == here or p.startswith(here + os.sep)


# Events that change the file system, by the position of their path arguments.
PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
    "os.replace": (0, 1), "os.link": (0, 1), "os.symlink": (0, 1), "os.truncate": (0,),
    "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,), "shutil.rmtree": (0,),
    "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (1,),
}
# Events that would leave the sandbox's reach (new programs, the network, foreign code).
DENIED = {
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.startfile",
    "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo", "ctypes.dlopen",
    "ctypes.dlsym", "os.kill", "os.killpg", "os.chdir", "os.chroot",
}


def audit(event, args):
    if event in DENIED:
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args
        writes = (mode is not None and any(c in mode for c in "wax+")) or (
            flags is not None and flags & WRITE_FLAGS
        )
        if writes and not isinstance(path, int) and not inside(path):
            raise PermissionError(f"sandbox: writing {path!r} outside the sandbox")
    elif event in PATH_EVENTS:
        for i in PATH_EVENTS[event]:
            if i < len(args) and not isinstance(args[i], int) and not inside(args[i]):
                raise PermissionError(f"sandbox: {event} on {args[i]!r} outside the sandbox")
    elif event == "import" and args[0] in ("ctypes", "_ctypes"):
        raise PermissionError("sandbox: ctypes is not allowed")


with open("program.py", encoding="utf-8") as f:
    source = f.read()
code = compile(source, "program.py", "exec")
sys.addaudithook(audit)
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
sys.stdout.flush()
os._exit(0)

"""`python -m ddprun` (and Python code that wants to start the launcher): each
function replaces the Python process
with the launcher binary shipped in this package (os.execv), under the name
it was invoked as, which is what the binary dispatches on (argv[0]: ddprun is
torchrun, ddprun-launch torch.distributed.launch, ddprun-accelerate
`accelerate launch`, ddprun-deepspeed `deepspeed`). After the exec the
process is the binary: its pid, its signal handling, its exit code.

The commands the wheel puts on PATH are shell scripts that exec the binary
directly (make_dist.PATH_SCRIPT): no interpreter start at all.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.path.join(_HERE, "bin")


def _python3_on_path(environ):
    for d in environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(d or ".", "python3")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def worker_environment(environ, executable):
    """The environment for the launcher: `environ`, plus PYTHON_EXEC set to
    this interpreter when it is not set and the `python3` on PATH is another
    one (an environment's bin/ddprun run without activating it). torchrun,
    a console script of the same environment, runs its workers with its own
    interpreter (sys.executable); the binary otherwise takes python3 from
    PATH."""
    if environ.get("PYTHON_EXEC") or not executable:
        return environ
    on_path = _python3_on_path(environ)
    if on_path and (os.path.dirname(os.path.abspath(on_path)) ==
                    os.path.dirname(os.path.abspath(executable))):
        return environ
    env = dict(environ)
    env["PYTHON_EXEC"] = executable
    return env


def exec_binary(binary, argv0, args):
    """Never returns: the process becomes BIN_DIR/binary with argv
    [argv0] + args."""
    path = os.path.join(BIN_DIR, binary)
    env = worker_environment(os.environ, sys.executable)
    try:
        os.execve(path, [argv0] + list(args), env)
    except OSError as e:
        sys.stderr.write("%s: cannot run %s: %s\n" % (argv0, path, e))
        sys.exit(127)


def ddprun():
    exec_binary("ddprun", "ddprun", sys.argv[1:])


def ddprun_launch():
    exec_binary("ddprun", "ddprun-launch", sys.argv[1:])


def ddprun_accelerate():
    exec_binary("ddprun", "ddprun-accelerate", sys.argv[1:])


def ddprun_deepspeed():
    exec_binary("ddprun", "ddprun-deepspeed", sys.argv[1:])


def ddprun_rendezvous():
    exec_binary("ddprun-rendezvous", "ddprun-rendezvous", sys.argv[1:])

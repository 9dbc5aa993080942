"""ddprun's stack-dump hook for Python workers.

ddprun appends the folder holding this file to its workers' PYTHONPATH
(before the standard library's folders, where Debian's sitecustomize lies).
When DDPRUN_STACKS_FILE and DDPRUN_STACKS_SIGNAL are set, the interpreter
registers faulthandler for that signal: on it, the stacks of every thread are
appended to the file by faulthandler's C handler, which works while the main
thread is blocked in a collective (C++), holds no lock and changes nothing in
the program. ddprun sends the signal when its watchdog finds a hung worker,
and when ddprun itself gets SIGUSR2.

Then it loads the sitecustomize module the interpreter would have found
without ddprun (Debian ships one), so a user's setup is unchanged. Nothing
here may break a worker: every failure is silent.
"""
import os as _os
import sys as _sys


def _ddprun_register_stack_dump():
    path = _os.environ.get("DDPRUN_STACKS_FILE")
    signum = _os.environ.get("DDPRUN_STACKS_SIGNAL")
    if not path or not signum:
        return
    try:
        import faulthandler

        # Appending: ddprun writes a header line before each request, and
        # each dump follows its header. faulthandler keeps the file open.
        stream = open(path, "a")
        faulthandler.register(
            int(signum), file=stream, all_threads=True, chain=False)
    except Exception:  # noqa: BLE001 - the worker must run regardless
        pass


def _ddprun_load_next_sitecustomize():
    here = _os.path.dirname(_os.path.realpath(__file__))
    rest = []
    for entry in _sys.path:
        try:
            if _os.path.realpath(entry or ".") == here:
                continue
        except (OSError, ValueError):
            pass
        rest.append(entry)
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # As if it had been imported in our place: site.py's error handling and
    # `import sitecustomize` elsewhere see that module.
    _sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_ddprun_register_stack_dump()
_ddprun_load_next_sitecustomize()

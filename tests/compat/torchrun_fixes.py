"""What Debian's torchrun needs to start at all on the test machines; loaded
by a sitecustomize in the torchrun process only (never in workers).

1. torch 1.13 (bookworm) under Python 3.11: torchrun dies at start-up in
   Std.from_str ("'NoneType' object has no attribute 'get'"): iterating an
   IntFlag no longer yields its zero member, so the value-to-Std map lacks
   NONE. Parse the two accepted forms directly.
2. torch 2.6 (trixie) is built without libuv, yet its TCPStore asks for a
   libuv server by default, and torchrun's static and c10d rendezvous (and
   the store the c10d rendezvous shares with workers) are created without a
   use_libuv argument: torchrun cannot start ("use_libuv was requested but
   PyTorch was build without libuv support"), whatever USE_LIBUV says. The
   stores those modules create retry without libuv, as ddprun's C++ worker
   does. Python workers honour USE_LIBUV=0, except where torch 2.6 makes
   the store itself: a worker's init_process_group under torchrun's agent
   store (TORCHELASTIC_USE_AGENT_STORE=True: static rendezvous and c10d)
   creates its TCPStore client without use_libuv, so a worker that meets
   torchrun 2.6 that way applies fix_worker_store() (the same retry).
"""

import re


def _fix_std_from_str():
    from torch.distributed.elastic.multiprocessing import api

    std = api.Std
    value = getattr(api, "_VALUE_REGEX", None)
    mapping = getattr(api, "_MAPPING_REGEX", None)
    if value is None or mapping is None:
        return
    original = std.from_str

    def from_str(text):
        if re.match(value, text):
            return std(int(text))
        if re.match(mapping, text):
            return {int(k): std(int(v))
                    for k, v in (item.split(":") for item in text.split(","))}
        return original(text)

    std.from_str = staticmethod(from_str)


def _fix_tcp_store_without_libuv():
    import importlib

    import torch.distributed as dist

    base = dist.TCPStore

    class TCPStore(base):
        def __init__(self, *args, **kwargs):
            try:
                super().__init__(*args, **kwargs)
            except RuntimeError as e:
                if "without libuv" not in str(e):
                    raise
                kwargs["use_libuv"] = False
                super().__init__(*args, **kwargs)

    for name in ("torch.distributed.rendezvous",
                 "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
                 "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
                 "torch.distributed.elastic.utils.distributed"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "TCPStore", None) is base:
            module.TCPStore = TCPStore
    # c10d rendezvous (--standalone, --rdzv_backend=c10d) shares its store
    # through dynamic_rendezvous, which calls dist.TCPStore at run time.
    dist.TCPStore = TCPStore


def fix_worker_store():
    """For workers that call init_process_group: their stores retry without
    libuv where torch was built without it (nothing changes elsewhere)."""
    _fix_tcp_store_without_libuv()


def apply():
    try:
        _fix_std_from_str()
    except Exception:  # another torch: nothing to fix
        pass
    try:
        _fix_tcp_store_without_libuv()
    except Exception:
        pass

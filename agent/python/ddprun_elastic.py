"""ddprun's restart scope "failed" for PyTorch scripts: a failed rank costs
that rank, not the job.

Under ``ddprun --restart_scope failed`` (workers get
DDPRUN_RESTART_SCOPE=failed) the agent starts a failed worker again alone,
with the same RANK, and the other workers keep running. This module is the
worker side of that contract (docs/restart_scope.md) with torch's own API:

    import ddprun_elastic

    elastic = ddprun_elastic.Elastic(backend="gloo")  # init_process_group
    model, optimizer = Net(), torch.optim.SGD(...)
    progress = {"step": 0}
    elastic.track("model", model)            # state_dict / load_state_dict
    elastic.track("optimizer", optimizer)
    elastic.track("progress", progress)      # a dict is sent whole
    elastic.start()                          # a replacement heals here
    while progress["step"] < steps:
        def compute():                       # every collective of a step
            loss = loss_fn(elastic.ddp(model)(x), y)
            loss.backward()
            return loss
        def apply(loss):                     # runs once the step committed
            optimizer.step()
            progress["step"] += 1
        elastic.run_step(progress["step"] + 1, compute, apply)

What it does, in the contract's terms:
  * generations: the process group of generation g lives under the store
    prefix "/worker/attempt_<k>/ddprun/gen/<g>/" (k = the restart count) of
    the agent's store (TORCHELASTIC_USE_AGENT_STORE=True); a group start is
    generation 0, a replacement starts in DDPRUN_GENERATION with
    DDPRUN_REPLACEMENT=1;
  * run_step(step, compute, apply): zeroes the tracked optimizers' gradients,
    re-seeds torch's generators from (seed, rank, step), runs compute(), then
    the step agreement (every rank adds itself to "commit/<step>/count"; the
    last one writes "commit", a rank that sees the agent's generation move
    writes "abort"; the first write wins); on "commit" it calls
    apply(result) and returns result. When a collective fails (a peer died)
    or the step aborts, it puts back the tracked modules' buffers,
    re-forms (destroy_process_group, wait for the agent's next generation,
    init_process_group on its prefix), heals, and runs the step again;
  * heal(): the generation's source rank (the lowest rank the agent did not
    replace) broadcasts every tracked object's state_dict (torch.save'd) and
    every other rank loads it; then the source sets
    "/ddprun/generation/<g>/healed";
  * ddp(module): a DistributedDataParallel of `module`, built anew after
    every re-form (it holds the process group): call it in each step.
  * the generation signal: when the job's environment names one
    (DDPRUN_GENERATION_SIGNAL=SIGUSR1 in ddprun's environment), every agent
    sends it to its running workers once the store shows a new generation,
    whichever node replaced a rank. Elastic installs a handler for it (so it
    does not end the process) that counts it (`notices`); the next run_step
    reads the generation and, when it moved, re-forms and heals before its
    first collective instead of finding out from a failed one. A survivor
    that was not in a collective with the dead rank (another node's, busy
    with its own work) so re-forms at once.
The heal timeout (DDPRUN_HEAL_TIMEOUT_S, default 120 s) bounds every wait:
past it the worker raises ElasticError and exits non-zero, and the agent
restarts the group. Outside restart scope "failed" (no DDPRUN_RESTART_SCOPE,
or "group", or no agent store) Elastic is a plain init_process_group and
run_step runs compute() and apply() once: the same script runs under
torchrun. A script that does not use this module keeps working too: under
"failed" its next collective fails and it exits non-zero, as under a group
restart.

A Gloo all-reduce of a DDP built anew sums each bucket in the order of its
new layout until DDP rebuilds its buckets after its first step, so after a
heal a model whose parameters' gradients become ready in another order than
they were registered may differ from the uninterrupted run by float
rounding (the C++ runtime passes the old layout on instead).
"""
import atexit as _atexit
import datetime as _datetime
import gc as _gc
import hashlib as _hashlib
import io as _io
import json as _json
import os as _os
import signal as _signal
import sys as _sys
import threading as _threading
import time as _time

import torch as _torch
import torch.distributed as _dist

__all__ = ["Elastic", "ElasticError", "StepAborted"]

_ABSENT = b"\x00ddprun-absent"
# Phrases of a collective that failed because a peer died (as the C++
# runtime's RunMain classifies them).
_COLLECTIVE_PHRASES = (
    "Connection closed by peer", "Connection reset by peer", "Broken pipe",
    "Timed out", "timed out", "Socket Timeout", "Gloo connectFullMesh failed",
    "NCCL error", "ProcessGroupGloo", "Connection refused", "gloo/transport",
)


class ElasticError(RuntimeError):
    """The job cannot go on in place (heal timeout, a bad record, a second
    failure without a new generation): exit non-zero, the agent restarts
    the group."""


class StepAborted(RuntimeError):
    """A step the ranks did not all finish (the agreement said "abort")."""


def _env_int(name, default):
    value = _os.environ.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ElasticError("%s=%r is not an integer" % (name, value))


def _looks_collective(error):
    text = str(error)
    return any(p in text for p in _COLLECTIVE_PHRASES)


def _mix_seed(*parts):
    digest = _hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class Elastic:
    """The worker side of restart scope "failed" (see the module doc)."""

    def __init__(self, backend="gloo", timeout=None, seed=0):
        env = _os.environ
        self.rank = int(env["RANK"])
        self.world_size = int(env["WORLD_SIZE"])
        self.backend = backend
        self.seed = seed
        self.scope = env.get("DDPRUN_RESTART_SCOPE", "") or "group"
        if self.scope not in ("group", "failed"):
            raise ElasticError(
                "DDPRUN_RESTART_SCOPE=%r is not group or failed" % self.scope)
        self.reforms = (self.scope == "failed" and
                        env.get("TORCHELASTIC_USE_AGENT_STORE") == "True")
        self.generation = _env_int("DDPRUN_GENERATION", 0)
        self.replacement = env.get("DDPRUN_REPLACEMENT", "") == "1"
        self.heal_timeout = _env_int("DDPRUN_HEAL_TIMEOUT_S", 120)
        self.timeout = timeout or _datetime.timedelta(seconds=1800)
        self.source = 0
        self.replaced = []
        self.has_state = not self.replacement
        self._tracked = []
        self._ddp = {}
        self._waiter = None
        self._added = -1
        # Generation signals received (DDPRUN_GENERATION_SIGNAL), and one
        # not yet acted on.
        self.notices = 0
        self._notice_pending = False
        self._raw = None
        self._closed = False
        # Before the interpreter tears its modules down: a process group
        # left to that teardown can end a finished worker with "terminate
        # called without an active exception" (torch 1.13's Gloo threads),
        # exit code 134 after its last step.
        _atexit.register(self.close)
        if not self.reforms:
            if self.scope == "failed" and self.rank == 0:
                print("ddprun_elastic: DDPRUN_RESTART_SCOPE=failed needs the "
                      "agent's store (TORCHELASTIC_USE_AGENT_STORE=True); "
                      "this job restarts as a group", file=_sys.stderr)
            _dist.init_process_group(backend, timeout=self.timeout)
            return
        self._addr = env["MASTER_ADDR"]
        self._port = int(env["MASTER_PORT"])
        self._attempt = "/worker/attempt_%s" % env.get(
            "TORCHELASTIC_RESTART_COUNT", "0")
        self._raw = self._client()
        self._install_notice_handler(env.get("DDPRUN_GENERATION_SIGNAL", ""))
        deadline = _time.monotonic() + (
            self.heal_timeout if self.replacement else
            self.timeout.total_seconds())
        self._form_newest(self.generation, deadline)

    def close(self):
        """Drops the process group, the DDPs built on it and the store
        clients; run at the interpreter's exit if not called before. Call
        it when training is over (nothing works after it)."""
        if self._closed:
            return
        self._closed = True
        self._ddp.clear()
        self._waiter = None
        try:
            if _dist.is_initialized():
                _dist.destroy_process_group()
        except (RuntimeError, AssertionError, ValueError):
            pass
        self._raw = None
        _gc.collect()

    # --- state ------------------------------------------------------------
    def track(self, name, obj):
        """Heals `obj` (anything with state_dict/load_state_dict, or a dict,
        updated in place) under `name`. Call on every rank in the same
        order, before start()."""
        self._tracked.append((name, obj))

    def start(self):
        """A replacement heals from the generation's source (collective with
        the survivors' heal); a group start does nothing."""
        if self.reforms and not self.has_state:
            self._heal_loop("replacement of rank %d" % self.rank)

    def ddp(self, module, **kwargs):
        """DistributedDataParallel(module, **kwargs) of the current process
        group (built once per generation)."""
        key = id(module)
        cached = self._ddp.get(key)
        if cached is None or cached[0] != self.generation:
            wrapped = _torch.nn.parallel.DistributedDataParallel(module,
                                                                 **kwargs)
            self._ddp[key] = (self.generation, wrapped)
            return wrapped
        return cached[1]

    # --- steps ------------------------------------------------------------
    def run_step(self, step, compute, apply):
        """Runs step `step` (1-based: the steps done so far + 1) until it
        commits on every rank: compute() then, committed, apply(result).
        Returns compute()'s result. See the module doc."""
        if not self.reforms:
            result = compute()
            apply(result)
            return result
        while True:
            if self._notice_pending:
                self._notice_pending = False
                latest = self.latest_generation()
                if latest > self.generation:
                    why = "generation %d announced (signal)" % latest
                    self.reform(why)
                    self._heal_loop(why)
                    continue
            buffers = self._save_buffers()
            try:
                for _, obj in self._tracked:
                    if isinstance(obj, _torch.optim.Optimizer):
                        obj.zero_grad()
                _torch.manual_seed(_mix_seed(self.seed, self.rank, step))
                result = compute()
                if not self.agree(step):
                    raise StepAborted(
                        "step %d aborted: not every rank finished it "
                        "(generation %d lost a rank)" % (step, self.generation))
            except (RuntimeError, StepAborted) as error:
                if isinstance(error, ElasticError) or not (
                        isinstance(error, StepAborted) or
                        _looks_collective(error)):
                    raise
                why = str(error)
            else:
                apply(result)
                return result
            # Re-formed only here, after the except block: its traceback
            # holds the failed collective's frames, whose work keeps the old
            # Gloo context, and so its connections, open. A peer blocked in
            # a receive from this rank would then wait for the Gloo timeout
            # instead of failing at once and re-forming too (seen under torch
            # 2.6: a third survivor missed the heal timeout).
            result = None
            self._abort_unless_added(step)
            self._restore_buffers(buffers)
            self.reform(why)
            self._heal_loop(why)

    def agree(self, step):
        """The step agreement (collective over the store): True to apply
        step `step`, False when it aborts."""
        store = self._gen_store
        decision = "commit/%d/decision" % step
        n = store.add("commit/%d/count" % step, 1)
        self._added = step
        if n == self.world_size:
            store.compare_set(decision, "", "commit")
        deadline = _time.monotonic() + self.timeout.total_seconds()
        while True:
            if self._waiter is None:
                self._waiter = _dist.PrefixStore(self._gen_prefix(),
                                                 self._attempt_store())
            try:
                self._waiter.wait([decision],
                                  _datetime.timedelta(milliseconds=200))
                break
            except RuntimeError:
                # A timed-out wait leaves torch 1.13's client unusable.
                self._waiter = None
            if self.latest_generation() > self.generation:
                store.compare_set(decision, "", "abort")
                break
            if _time.monotonic() > deadline:
                raise ElasticError("step %d: no commit decision" % step)
        return store.get(decision) == b"commit"

    # --- generations ------------------------------------------------------
    def _install_notice_handler(self, name):
        if not name:
            return
        number = getattr(_signal, name, None) if name.startswith("SIG") else None
        if not isinstance(number, int):
            raise ElasticError(
                "DDPRUN_GENERATION_SIGNAL=%r is not a signal name such as "
                "SIGUSR1" % name)
        if _threading.current_thread() is not _threading.main_thread():
            raise ElasticError(
                "DDPRUN_GENERATION_SIGNAL is set: create Elastic on the main "
                "thread (only it can install the signal's handler)")

        def notice(signum, frame):
            # Only a flag: the store is read by the next run_step, never in
            # the handler (it may interrupt a store call).
            self.notices += 1
            self._notice_pending = True

        _signal.signal(number, notice)

    def latest_generation(self):
        """The newest generation the agent announced (0 when none)."""
        value = self._raw.compare_set("/ddprun/generation", _ABSENT, _ABSENT)
        if value == _ABSENT:
            return 0
        try:
            return int(value)
        except ValueError:
            raise ElasticError("/ddprun/generation holds %r" % value)

    def reform(self, why):
        """Drops the process group, waits (at most the heal timeout) for the
        agent's next generation and joins the newest one."""
        print("ddprun_elastic: rank %d re-forms (generation %d): %s" %
              (self.rank, self.generation, why), file=_sys.stderr)
        self._ddp.clear()
        self._waiter = None
        try:
            _dist.destroy_process_group()
        except (RuntimeError, AssertionError, ValueError):
            pass
        # Whatever still holds the old group (a DDP's reducer in a cycle)
        # goes now, so its connections close and blocked peers fail.
        _gc.collect()
        deadline = _time.monotonic() + self.heal_timeout
        while True:
            latest = self.latest_generation()
            if latest > self.generation:
                break
            if _time.monotonic() > deadline:
                raise ElasticError(
                    "no generation after %d within the heal timeout (%d s, "
                    "DDPRUN_HEAL_TIMEOUT_S); the failure that made this rank "
                    "re-form: %s" % (self.generation, self.heal_timeout, why))
            _time.sleep(0.05)
        self._form_newest(latest, deadline)

    def heal(self):
        """Collective over the new process group: every rank takes the
        tracked state of the generation's source rank."""
        start = _time.monotonic()
        flags = _torch.tensor([1 if self.has_state else 0], dtype=_torch.long)
        every = [_torch.zeros_like(flags) for _ in range(self.world_size)]
        _dist.all_gather(every, flags)
        if int(every[self.source][0]) == 0:
            raise ElasticError(
                "generation %d: the source rank %d holds no state" %
                (self.generation, self.source))
        payload = b""
        if self.rank == self.source:
            states = {}
            for name, obj in self._tracked:
                states[name] = dict(obj) if isinstance(obj, dict) else \
                    obj.state_dict()
            buffer = _io.BytesIO()
            _torch.save(states, buffer)
            payload = buffer.getvalue()
        size = _torch.tensor([len(payload)], dtype=_torch.long)
        _dist.broadcast(size, self.source)
        data = _torch.zeros(int(size[0]), dtype=_torch.uint8)
        if self.rank == self.source:
            data.copy_(_torch.frombuffer(bytearray(payload),
                                         dtype=_torch.uint8))
        _dist.broadcast(data, self.source)
        if self.rank != self.source:
            states = _torch.load(_io.BytesIO(data.numpy().tobytes()))
            for name, obj in self._tracked:
                if isinstance(obj, dict):
                    obj.clear()
                    obj.update(states[name])
                else:
                    obj.load_state_dict(states[name])
        _dist.barrier()
        if self.rank == self.source:
            self._raw.set("/ddprun/generation/%d/healed" % self.generation,
                          "1")
        self.has_state = True
        print("ddprun_elastic: rank %d healed (generation %d) from rank %d "
              "in %.2f s" % (self.rank, self.generation, self.source,
                             _time.monotonic() - start), file=_sys.stderr)

    # --- internals --------------------------------------------------------
    def _client(self):
        timeout = _datetime.timedelta(seconds=300)
        try:
            return _dist.TCPStore(self._addr, self._port, self.world_size,
                                  False, timeout)
        except RuntimeError as error:
            # torch >= 2.4 asks for libuv by default; a torch built without
            # it (Debian trixie's 2.6) refuses unless told not to.
            if "libuv" not in str(error):
                raise
            return _dist.TCPStore(self._addr, self._port, self.world_size,
                                  False, timeout, use_libuv=False)

    def _attempt_store(self):
        return _dist.PrefixStore(self._attempt, self._client())

    def _gen_prefix(self):
        return "ddprun/gen/%d" % self.generation

    def _heal_loop(self, why):
        while True:
            try:
                self.heal()
                return
            except RuntimeError as error:
                if isinstance(error, ElasticError) or not _looks_collective(
                        error):
                    raise
                why = str(error)
            self.reform(why)

    def _abort_unless_added(self, step):
        if self._added == step:
            return
        try:
            self._gen_store.compare_set("commit/%d/decision" % step, "",
                                        "abort")
        except RuntimeError:
            pass  # the waiting ranks see the generation move instead

    def _save_buffers(self):
        saved = []
        for _, obj in self._tracked:
            if isinstance(obj, _torch.nn.Module):
                saved.append([b.detach().clone() for b in obj.buffers()])
        return saved

    def _restore_buffers(self, saved):
        modules = [obj for _, obj in self._tracked
                   if isinstance(obj, _torch.nn.Module)]
        with _torch.no_grad():
            for module, buffers in zip(modules, saved):
                for b, s in zip(module.buffers(), buffers):
                    b.copy_(s)

    def _form_newest(self, generation, deadline):
        while True:
            moved = self._form(generation, deadline)
            if moved is None:
                return
            print("ddprun_elastic: generation %d was superseded by %d while "
                  "it formed" % (generation, moved), file=_sys.stderr)
            generation = moved

    def _form(self, g, deadline):
        """Joins generation g; returns a newer generation when the agent
        moved on meanwhile, else None."""
        if g > 0:
            record = self._raw.compare_set("/ddprun/generation/%d" % g,
                                           _ABSENT, _ABSENT)
            if record == _ABSENT:
                raise ElasticError("generation %d has no record" % g)
            parsed = _json.loads(record)
            self.source = int(parsed["source"])
            self.replaced = sorted(int(r) for r in parsed["replaced"])
        else:
            self.source, self.replaced = 0, []
        self.generation = g
        store = _dist.PrefixStore(self._gen_prefix(), self._attempt_store())
        if store.add("ddprun/init/arrived", 1) == self.world_size:
            store.set("ddprun/init/done", "1")
        while store.compare_set("ddprun/init/done", _ABSENT,
                                _ABSENT) == _ABSENT:
            latest = self.latest_generation()
            if latest > g:
                return latest
            if _time.monotonic() > deadline:
                raise ElasticError(
                    "generation %d: %d of %d ranks arrived within the heal "
                    "timeout (%d s, DDPRUN_HEAL_TIMEOUT_S)" %
                    (g, store.add("ddprun/init/arrived", 0), self.world_size,
                     self.heal_timeout))
            _time.sleep(0.02)
        self._gen_store = store
        self._waiter = None
        self._added = -1
        _dist.init_process_group(
            self.backend, store=_dist.PrefixStore("pg", store),
            rank=self.rank, world_size=self.world_size, timeout=self.timeout)
        return None

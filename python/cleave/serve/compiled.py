"""The compiled data plane: the parts as Ray actors (one per part and lane) joined by a Ray
Compiled Graph that the ingress builds, drives, and rebuilds when an actor or its node dies."""

import asyncio
import os
import threading
import time

from . import actors
from .actors import per_backend_value
from .runtime import open_part
from .wire import innermost, short_error

# How long a rebuilt plane waits for its actors between two looks at why they are not up.
PLANE_WAIT_STEP_S = 5.0


# A compiled graph's channel readers poll (sched_yield) while they wait (see WAIT_AS_IDLE);
# after this many seconds without a request the plane may release its
# actors, the next request building them again (a model load and a compile: seconds). Off (0):
# with Ray 2.60, tearing down a graph whose channels cross nodes crashed the raylet
# (experimental_mutable_object_provider.cc:154, "Channel closed"), and a 9-part graph took
# longer to build than a request's 10 s.
PLANE_IDLE_S = 0.0

# Seconds a new graph has to carry its first (skipped) request end to end.
PLANE_FIRST_RUN_S = 60.0

# Seconds a given-up request's results may take to come out of the graph before the lane
# counts as stuck and is built again.
PLANE_DRAIN_S = 30.0

# Whether the threads that wait on the graph's channels (each actor's loop, the ingress's result
# reader) wait under SCHED_IDLE: Ray's channel reads spin (sched_yield) until a value comes, and
# at the normal policy each spinner takes a core's fair share from whatever runs beside it.
# Under SCHED_IDLE a spinner gets only what nothing else wants. An actor's loop goes back to the
# normal policy before its part runs (where the system lets a thread leave SCHED_IDLE:
# RLIMIT_NICE, or CAP_SYS_NICE; else it keeps the normal policy throughout) and to SCHED_IDLE
# WAIT_QUIET_S seconds after its last request. Ray's copies into and out of the channels run on
# these threads too, so under other load on the node they wait for idle CPU; keeping a busy
# deployment's waiting threads at the normal policy cost throughput on this 2-core VM (resnet50
# in 2 stages at 8 in flight: 0.54 of the limit against 0.64 to 0.75, measured 2026-11-27).
WAIT_AS_IDLE = True
WAIT_QUIET_S = 0.0

# The niceness a part's threads run at where the system allows it (None: as Ray made them).
# Ray starts every worker at niceness 15 (its worker_niceness) so that its own daemons come
# first; beside a part's engine the other claimants of the cores are the graph's waiting
# threads, whose SCHED_IDLE weight (3) is a twelfth of a niceness-15 thread's (36) and under a
# three-hundredth of a niceness-0 one's (1024). At 15, the ingress's spinning result reader and
# the waiting actors kept taking a tenth of a core from the parts. Raising a thread's priority
# needs CAP_SYS_NICE or RLIMIT_NICE; where neither is there the part keeps Ray's niceness.
PART_NICENESS = 0

# The reader thread Ray's asyncio driver reads a compiled graph's results on (its
# ThreadPoolExecutor's name prefix, ray/experimental/channel/common.py).
_RESULT_READER_THREAD = "channel.AwaitableBackgroundReader"


def _set_policy(tid, idle):
    """Puts thread `tid` (0: the calling one) at SCHED_IDLE (idle) or back at SCHED_OTHER;
    False where the system refuses."""
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))
        return True
    except (AttributeError, OSError):
        return False


def _set_niceness(tid):
    """Puts thread `tid` (0: the calling one) at PART_NICENESS; False where the system refuses."""
    if PART_NICENESS is None:
        return False
    try:
        # On Linux PRIO_PROCESS with a thread id sets that thread only.
        os.setpriority(os.PRIO_PROCESS, tid, PART_NICENESS)
        return True
    except (AttributeError, OSError):
        return False


def _can_leave_idle():
    """Whether a thread here may go to SCHED_IDLE and come back (RLIMIT_NICE may forbid the
    return); tried on a thread of its own, so no thread that matters is left idle."""
    if not WAIT_AS_IDLE:
        return False
    got = []
    t = threading.Thread(target=lambda: got.append(_set_policy(0, True) and _set_policy(0, False)))
    t.start()
    t.join()
    return bool(got and got[0])


def _result_reader_tids():
    """This process's compiled-graph result reader threads."""
    return [
        t.native_id
        for t in threading.enumerate()
        if t.name.startswith(_RESULT_READER_THREAD) and t.native_id is not None
    ]


class QuietPolicy:
    """Puts threads at SCHED_IDLE once WAIT_QUIET_S seconds pass with no work begun, and back at
    SCHED_OTHER when work begins. `begin` and `end` bracket each piece of work; `tids` gives
    the threads (read when the policy changes). A timer thread does the demotion, under a
    lock that `begin` takes too, so a thread is never left idle with work running."""

    def __init__(self, tids, can_leave_idle):
        self.tids = tids
        self.can_leave_idle = can_leave_idle
        self.lock = threading.Lock()
        self.running = 0
        self.generation = 0
        self.idle = False

    def begin(self):
        with self.lock:
            self.running += 1
            self.generation += 1
            if self.idle and self.can_leave_idle:
                self.idle = not all([_set_policy(t, False) for t in self.tids()])

    def end(self):
        with self.lock:
            self.running -= 1
            generation = self.generation
        if WAIT_AS_IDLE and WAIT_QUIET_S <= 0:
            self._quiet(generation)
        elif WAIT_AS_IDLE:
            timer = threading.Timer(WAIT_QUIET_S, self._quiet, (generation,))
            timer.daemon = True
            timer.start()

    def _quiet(self, generation):
        with self.lock:
            if self.running or generation != self.generation or self.idle:
                return
            tids = self.tids()
            self.idle = bool(tids) and all([_set_policy(t, True) for t in tids])


class Watchdog:
    """Stops runs past their deadline (``terminate`` on their run options, as ONNX Runtime and
    OpenVINO take it) from one thread per part, which sleeps until the earliest deadline or
    WATCH_STEP_S. A thread per request (threading.Timer) cost 0.1 ms to start on this VM, and
    its start waits for a core, on the path of every request."""

    WATCH_STEP_S = 1.0

    def __init__(self):
        self.cv = threading.Condition()
        self.armed = {}  # token: (deadline on the monotonic clock, run options)
        self.tokens = 0
        self.wake_at = float("inf")  # when the thread looks next on its own
        self.thread = None

    def arm(self, left_s, run_options):
        deadline = time.monotonic() + left_s
        with self.cv:
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="cleave-watchdog", daemon=True)
                self.thread.start()
            self.tokens += 1
            self.armed[self.tokens] = (deadline, run_options)
            # Woken only for a deadline before its next look: most requests cost it nothing.
            if deadline < self.wake_at:
                self.cv.notify()
            return self.tokens

    def disarm(self, token):
        with self.cv:
            self.armed.pop(token, None)

    def _watch(self):
        with self.cv:
            while True:
                now = time.monotonic()
                for token in [t for t, (d, _) in self.armed.items() if d <= now]:
                    _, options = self.armed.pop(token)
                    try:
                        options.terminate = True
                    except Exception:  # an engine that cannot stop: the run finishes
                        pass
                self.wake_at = min([d for d, _ in self.armed.values()] + [now + self.WATCH_STEP_S])
                self.cv.wait(max(0.0, self.wake_at - now))


# Executions in flight in a lane whose parts run on more than one node. With Ray 2.60 a
# 4-part graph alternating between two nodes stopped answering for good at 4 requests in
# flight (every request out of time, none after), and ran at 2; on one node it ran at 16.
CROSS_NODE_IN_FLIGHT = 2


# Ray errors after which a compiled graph cannot run again: an actor or its node died, or
# Ray tore the graph down.
_PLANE_BROKEN = (
    "RayChannelError",
    "RayChannelTimeoutError",
    "ActorDiedError",
    "RayActorError",
    "ActorUnavailableError",
    "RayCgraphCapacityExceeded",
    "RaySystemError",
)


def compiled_plane_refusal(partition, replicas):
    """Why the compiled data plane cannot serve this deployment, or None. One actor belongs to
    one compiled graph, so a lane of the plane holds one replica of every part: replica
    counts that differ between parts leave no whole number of lanes."""
    counts = {per_backend_value(replicas, p["backend"], 1) for p in partition.parts}
    if len(counts) > 1:
        return (
            f"the parts have different replica counts ({', '.join(str(c) for c in sorted(counts))}), and a compiled "
            "graph "
            "holds one replica of every part; give every backend the same --replicas"
        )
    return None


class PartWorker:
    """One part on its engine, in a Ray actor that a compiled graph calls. It gets the
    request (graph inputs, deadline, whether the boundaries are wanted) when it reads a graph
    input, and the results of the parts it reads from; it answers what its consumers read
    and, where the ingress reads it (`read`), separately what the ingress needs (its time,
    and the tensors the client gets), so a boundary tensor goes part to part over Ray's
    channels and reaches the ingress only when asked for. A part the ingress does not read
    hands what the ingress needs from it to its consumers instead (``carry``), and a part the
    ingress reads hands on what it was carried: each result the ingress reads costs its
    driver a channel read on its one reader thread (0.3 ms a part on this 2-core VM)."""

    def __init__(self, spec, model_bytes, to_ingress, consumers, read=True):
        self.spec = spec
        # Before the engine starts: the threads it makes (intra-op pools) take this niceness.
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0) if not _set_niceness(0) else PART_NICENESS
        self.session = open_part(spec, model_bytes if model_bytes is not None else spec["file"])
        self.engine = self.session.engine
        self.outputs = list(spec["outputs"])
        self.inputs = list(spec["inputs"])
        self.to_ingress = [n for n in self.outputs if n in set(to_ingress)]
        self.consumers = bool(consumers)
        # A part nothing reads from is read by the ingress, or its results would be lost.
        self.read = bool(read) or not self.consumers
        self.name = f"{spec['deployment']} (backend {spec['backend']})"
        self.report = actors.part_report(spec, self.session)
        self.watchdog = Watchdog()
        # The graph's loop thread, which calls step; known from its first call.
        self.loop_tid = None
        can = _can_leave_idle()
        self.quiet = QuietPolicy(lambda: [self.loop_tid] if self.loop_tid else [], can) if can else None

    def ready(self):
        return {
            "inputs": self.session.input_specs(),
            "report": self.report,
            "waits_as_idle": self.quiet is not None,
            "niceness": self.niceness,
        }

    def _answer(self, down, up):
        if not self.consumers:
            return up
        return (down, up) if self.read else down

    def step(self, request, *upstream):
        """One request through the part (graph inputs and the upstream parts' answers in, its
        answers out). The graph's loop calls it on one thread, which waits for the next
        request, at SCHED_IDLE once the part has been quiet a while (WAIT_AS_IDLE)."""
        # On the node's monotonic clock, which every process on it shares: the ingress turns
        # it into the time the part's inputs took to reach it (CompiledPlane._timeline).
        t_in = time.monotonic()
        tid = threading.get_native_id()
        if tid != self.loop_tid:
            self.loop_tid = tid
            if self.niceness == PART_NICENESS:
                _set_niceness(tid)
        if self.quiet is None:
            return self._step(t_in, request, *upstream)
        self.quiet.begin()
        try:
            return self._step(t_in, request, *upstream)
        finally:
            self.quiet.end()

    def _step(self, t_in, request, *upstream):
        ctl = request["ctl"] if request is not None else None
        feeds, carried = {}, {}
        for r in upstream:
            if "skipped" in r:
                return self._answer(r, {"skipped": r["skipped"]})
            ctl = ctl or r["ctl"]
            carried.update(r.get("carry", {}))
            for name in self.inputs:
                if name in r["outputs"]:
                    feeds.setdefault(name, r["outputs"][name])
        if request is not None:
            for name in self.inputs:
                if name in request["feeds"]:
                    feeds.setdefault(name, request["feeds"][name])
        left = ctl["deadline"] - time.time()
        if left <= 0:
            # Out of time before it started: nobody waits for it, so it does not run.
            skipped = {"skipped": f"{self.spec['deployment']} did not start: the request was out of time"}
            return self._answer(skipped, skipped)
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise RuntimeError(f"{self.name} was not given {missing[0]!r}")
        run_options = self.session.run_options()
        # Stops a run past the request's time where the engine can (ONNX Runtime).
        token = self.watchdog.arm(left, run_options)
        t, t_cpu = time.perf_counter(), time.thread_time()
        try:
            values = self.session.run(self.outputs, feeds, run_options)
        except Exception as e:
            raise RuntimeError(f"{self.name} failed: {short_error(e)}") from None
        finally:
            self.watchdog.disarm(token)
        compute_s = time.perf_counter() - t
        # This thread's CPU time: an engine on one thread computes on it, and what it waited
        # for a core (parts outnumbering cores) is not in it.
        cpu_s = time.thread_time() - t_cpu
        outputs = dict(zip(self.outputs, values))
        keep = self.outputs if ctl["boundaries"] else self.to_ingress
        up = {
            "outputs": {n: outputs[n] for n in keep},
            "report": {
                "deployment": self.spec["deployment"],
                "backend": self.spec["backend"],
                "node_id": self.report["node_id"],
                "compute_s": compute_s,
                "cpu_s": cpu_s,
                "t_in": t_in,
                "t_out": time.monotonic(),
            },
        }
        if not self.read:
            carried[self.spec["deployment"]] = up
            return self._answer({"outputs": outputs, "ctl": ctl, "carry": carried}, None)
        up["carried"] = list(carried.values())
        return self._answer({"outputs": outputs, "ctl": ctl}, up)


class CompiledPlane:
    """The parts of one deployment as Ray actors (one per part in each lane, a lane per
    replica), each lane one compiled graph built from the partition's DAG and driven by the
    ingress that built it (a compiled graph runs only from the process that compiled it).
    When an actor or its node dies Ray tears the graph down; the plane then kills the lane's
    actors, makes new ones (they wait until a node with their resources is up), compiles
    again and says so in ``describe``."""

    def __init__(self, meta, workers, lanes, inflight):
        self.meta = meta
        self.workers = workers  # per part: (spec, model_bytes, actor options)
        self.inflight = inflight
        self.lanes = [
            {"index": i, "actors": [], "graph": None, "busy": 0, "ready": None, "slots": None, "reports": []}
            for i in range(lanes)
        ]
        self.state = "starting"
        self.rebuilds = 0
        self.idle_releases = 0
        self.release_error = None  # what went wrong releasing old actors, for describe
        self.last_used = time.monotonic()
        self.last_failure = None
        self.waiting = None
        self.specs = None
        # The ingress's result reader threads, each at SCHED_IDLE from its graph's first run
        # (WAIT_AS_IDLE): they only wait and read.
        self.reader_tids = []
        self.parts_wait_as_idle = None
        self.parts_niceness = None  # the niceness (or nicenesses) the parts' threads run at
        self.node_id = None  # the ingress's Ray node: parts on it share its monotonic clock
        producer = {}
        self.upstream, self.consumers, self.reads_request = [], [False] * len(meta["parts"]), []
        # The graph inputs each part reads: a part's request carries those and nothing else.
        self.request_inputs = []
        graph_outputs = set(meta["outputs"])
        for p in meta["parts"]:
            ups = sorted({producer[n] for n in p["inputs"] if n in producer})
            for j in ups:
                self.consumers[j] = True
            self.upstream.append(ups)
            # A part reads the request when it takes a graph input, or nothing else tells it
            # the request's deadline.
            self.reads_request.append(any(n not in producer for n in p["inputs"]) or not ups)
            self.request_inputs.append([n for n in p["inputs"] if n not in producer])
            for n in p["outputs"]:
                producer[n] = len(self.upstream) - 1
        # The parts the ingress reads: those giving graph outputs, and the sinks. The others'
        # reports (and boundaries) reach it carried by their consumers (PartWorker).
        self.read = [
            not self.consumers[i] or bool(graph_outputs.intersection(p["outputs"])) for i, p in enumerate(meta["parts"])
        ]

    async def start(self):
        for lane in self.lanes:
            lane["slots"] = asyncio.Semaphore(self.inflight)
            lane["ready"] = asyncio.get_running_loop().create_task(self._build(lane, first=True))
        if PLANE_IDLE_S > 0:
            self.watch = asyncio.get_running_loop().create_task(self._idle_watch())

    async def _idle_watch(self):
        while True:
            await asyncio.sleep(max(1.0, PLANE_IDLE_S / 4))
            if (
                self.state != "ready"
                or any(ln["busy"] for ln in self.lanes)
                or time.monotonic() - self.last_used < PLANE_IDLE_S
            ):
                continue
            self.state = "idle"
            self.idle_releases += 1
            for lane in self.lanes:
                graph, old = lane["graph"], lane["actors"]
                lane.update(graph=None, actors=[], ready=None)
                asyncio.get_running_loop().create_task(self._release(graph, old))

    def wake(self):
        """Builds the lanes again after an idle release."""
        if self.state != "idle":
            return
        self.state = "starting"
        for lane in self.lanes:
            lane["slots"] = asyncio.Semaphore(self.inflight)
            lane["ready"] = asyncio.get_running_loop().create_task(self._build(lane, first=False))

    async def _build(self, lane, first):
        import ray

        cls = ray.remote(PartWorker)
        while True:
            actors, graph = [], None
            try:
                for i, (spec, model_bytes, opts) in enumerate(self.workers):
                    actors.append(
                        cls.options(**opts).remote(
                            spec, model_bytes, self.meta["outputs"], self.consumers[i], self.read[i]
                        )
                    )
                infos = await self._await_ready(actors)
                graph = self._compile(actors)
                await self._first_run(graph)
            except Exception as e:
                for a in actors:
                    try:
                        ray.kill(a, no_restart=True)
                    except Exception:
                        pass
                if graph is not None:  # compiled, but its first request failed
                    await self._release(graph, [])
                self.last_failure = f"building the compiled graph failed: {short_error(e)}"
                if first:
                    self.state = "failed"
                    raise
                self.rebuilds += 1
                await asyncio.sleep(PLANE_WAIT_STEP_S)
                continue
            lane.update(actors=actors, graph=graph, reports=[x["report"] for x in infos])
            self.parts_wait_as_idle = all(x.get("waits_as_idle") for x in infos)
            # Every lane's, rebuilt ones included.
            self.parts_niceness = sorted(set(self.parts_niceness or []) | {x.get("niceness") for x in infos}, key=str)
            # A request still waiting on the old slots finds them replaced once it has one, and
            # gives it back (run), so the new count holds from here on.
            nodes = {x["report"].get("node_id") for x in infos}
            try:  # the ingress's own node: its channels to and from the lane count too
                self.node_id = ray.get_runtime_context().get_node_id()
                nodes.add(self.node_id)
            except Exception:
                pass
            lane["in_flight"] = min(self.inflight, CROSS_NODE_IN_FLIGHT) if len(nodes) > 1 else self.inflight
            lane["slots"] = asyncio.Semaphore(lane["in_flight"])
            if self.specs is None:
                specs = {}
                for x in infos:
                    for name, s in x["inputs"].items():
                        if name in self.meta["inputs"]:
                            specs.setdefault(name, s)
                self.specs = specs
            self.waiting = None
            self.state = "ready" if all(ln["graph"] is not None for ln in self.lanes) else self.state
            return

    async def _await_ready(self, actors):
        """The actors' reports once all are up: an actor whose resources no live node has
        stays pending, and ``describe`` says which."""
        futures = [asyncio.ensure_future(a.ready.remote()) for a in actors]
        while True:
            pending = [i for i, f in enumerate(futures) if not f.done()]
            if not pending:
                return [f.result() for f in futures]
            self.waiting = [self.workers[i][0]["deployment"] for i in pending]
            await asyncio.wait([futures[i] for i in pending], timeout=PLANE_WAIT_STEP_S)

    def _compile(self, actors):
        from ray.dag import InputNode, MultiOutputNode

        down, up = [], []
        with InputNode() as request:
            slot = 0
            for i, actor in enumerate(actors):
                args = []
                if self.reads_request[i]:
                    # One channel per part that reads the request (Ray makes one per input
                    # attribute): each carries that part's graph inputs only.
                    args, slot = [request[slot]], slot + 1
                args += [down[j] for j in self.upstream[i]]
                if not self.reads_request[i]:
                    args = [None] + args
                if self.consumers[i] and self.read[i]:
                    d, u = actor.step.options(num_returns=2).bind(*args)
                elif self.consumers[i]:
                    d, u = actor.step.bind(*args), None
                else:
                    d, u = None, actor.step.bind(*args)
                down.append(d)
                if u is not None:
                    up.append(u)
            dag = MultiOutputNode(up)
        return dag.experimental_compile(enable_asyncio=True, _max_inflight_executions=self.inflight)

    async def _first_run(self, graph):
        """One request already out of time through a new graph: every part skips it without
        running, which proves the channels carry a request end to end, leaves each actor's
        loop to its quiet policy and starts the ingress's result reader, whose thread is then
        put at SCHED_IDLE."""
        requests = self._requests({}, {"deadline": 0.0, "boundaries": False})
        results = await asyncio.wait_for(_gather(await graph.execute_async(*requests)), PLANE_FIRST_RUN_S)
        if not all("skipped" in r for r in results):
            raise RuntimeError("a request out of time was run by a part instead of skipped")
        if WAIT_AS_IDLE:
            self.reader_tids = [t for t in _result_reader_tids() if _set_policy(t, True)]

    def _requests(self, feeds, ctl):
        """What each part that reads the request is sent, in the graph's input order: its own
        graph inputs and the request's control fields."""
        return [
            {"feeds": {n: feeds[n] for n in self.request_inputs[i] if n in feeds}, "ctl": ctl}
            for i in range(len(self.reads_request))
            if self.reads_request[i]
        ]

    def _pick(self):
        ready = [ln for ln in self.lanes if ln["graph"] is not None]
        if not ready:
            return None
        return min(ready, key=lambda ln: ln["busy"])

    def unavailable(self):
        """Why no request can run now, or None."""
        if self._pick() is not None:
            return None
        if self.state == "failed":
            return f"the compiled data plane could not be built: {self.last_failure}"
        why = (
            f"the compiled data plane is being rebuilt after: {self.last_failure}"
            if self.rebuilds
            else "the compiled data plane is starting"
        )
        if self.waiting:
            why += f"; waiting for a node with the resources of {', '.join(self.waiting)}"
        return why

    async def run(self, feeds, boundaries, deadline, timeout_s):
        lane = self._pick()
        if lane is None:
            raise RuntimeError(self.unavailable())
        requests = self._requests(
            feeds, {"deadline": time.time() + (deadline - time.monotonic()), "boundaries": boundaries}
        )
        self.last_used = time.monotonic()
        lane["busy"] += 1
        slots = lane["slots"]
        try:
            await asyncio.wait_for(slots.acquire(), max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            lane["busy"] -= 1
            raise TimeoutError(
                f"no room in the compiled graph within {timeout_s:g}s "
                f"({lane.get('in_flight', self.inflight)} requests in it)"
            ) from None
        graph = lane["graph"]
        task = None
        try:
            if lane["slots"] is not slots:
                # The lane was rebuilt while this request waited: its slot counts for the old
                # graph (given back below, harmlessly), not the new one.
                raise RuntimeError(
                    f"the compiled data plane was rebuilt while the request waited (after: {self.last_failure})"
                )
            if graph is None:
                raise RuntimeError(self.unavailable())
            t_submit = time.monotonic()
            task = asyncio.ensure_future(_gather(await graph.execute_async(*requests)))
            results = await asyncio.wait_for(asyncio.shield(task), max(0.1, deadline - time.monotonic() + 1.0))
        except Exception as e:
            if isinstance(e, TimeoutError) and not _plane_broken(e):
                names = ", ".join(p["deployment"] for p in self.meta["parts"])
                raise TimeoutError(
                    f"{names} did not answer within {timeout_s:g}s (an actor or node may be down)"
                ) from None
            if _plane_broken(e):
                self._broken(lane, graph, e)
                raise RuntimeError(_broken_error(e)) from None
            raise RuntimeError(short_error(e)) from None
        finally:
            lane["busy"] -= 1
            if task is not None and not task.done():
                # Given up: the graph still owes this execution's results; they are read
                # before the slot is given back, so Ray's count of executions in flight stays
                # in step with the slots.
                asyncio.get_running_loop().create_task(self._drain(lane, graph, task, slots))
            else:
                slots.release()
        t_back = time.monotonic()
        skipped = [r["skipped"] for r in results if "skipped" in r]
        if skipped:
            raise TimeoutError(f"a part gave up: the request ran out of its {timeout_s:g}s ({skipped[0]})")
        results = self._by_part(results)
        self._timeline([r["report"] for r in results], t_submit, t_back)
        return results

    def _by_part(self, results):
        """Every part's result in the partition's order: those the ingress read, and those
        carried to it inside them (once each, though carried along several paths)."""
        got = {}
        for r in results:
            for x in [r, *r.pop("carried", [])]:
                got.setdefault(x["report"]["deployment"], x)
        return [got[p["deployment"]] for p in self.meta["parts"] if p["deployment"] in got]

    def _timeline(self, reports, t_submit, t_back):
        """Replaces each part's clock readings by what they tell of the path between the parts:
        ``in_s``, from its inputs being ready (the last of its producers done, or the ingress
        handing the graph the request) to the part beginning, and for a part only the ingress
        reads, ``out_s``, from its end to the ingress holding the request's results. A hop on
        the data plane is the one, the way back the other. Left out where a part ran on
        another node, whose clock is not this one."""
        stamps = [(r.pop("t_in", None), r.pop("t_out", None)) for r in reports]
        if (
            len(reports) != len(self.upstream)
            or any(t is None for pair in stamps for t in pair)
            or any(r.get("node_id") != self.node_id for r in reports)
            or self.node_id is None
        ):
            return
        for i, r in enumerate(reports):
            ready = max((stamps[j][1] for j in self.upstream[i]), default=t_submit)
            r["in_s"] = stamps[i][0] - ready
            if not self.consumers[i]:
                r["out_s"] = t_back - stamps[i][1]

    async def _drain(self, lane, graph, task, slots):
        try:
            await asyncio.wait_for(task, PLANE_DRAIN_S)
        except TimeoutError:
            # Parts skip a request past its deadline and cut a running one short, so a graph
            # that still owes results this long is stuck (a node died under it before Ray said
            # so): it holds slots no new request can get, and is built again.
            self._broken(lane, graph, TimeoutError(f"no result {PLANE_DRAIN_S:g}s after a request gave up"))
        except Exception as e:
            if _plane_broken(e):
                self._broken(lane, graph, e)
        finally:
            slots.release()

    def _broken(self, lane, graph, e):
        if lane["graph"] is not graph or graph is None:
            return  # already being rebuilt
        self.last_failure = _broken_cause(e)
        self.rebuilds += 1
        self.state = "rebuilding"
        old = lane["actors"]
        lane.update(graph=None, actors=[], slots=asyncio.Semaphore(self.inflight))
        lane["ready"] = asyncio.get_running_loop().create_task(self._rebuild(lane, graph, old))

    async def _rebuild(self, lane, graph, old):
        await self._release(graph, old)
        await self._build(lane, first=False)

    async def _release(self, graph, old):
        import ray

        for a in old:
            try:
                ray.kill(a, no_restart=True)
            except Exception as e:  # already gone with its node
                self.release_error = short_error(e)
        # Teardown waits for the actors' loops to end (up to Ray's teardown timeout): off the
        # event loop, so requests keep being answered meanwhile.
        if graph is not None:
            try:
                await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, graph.teardown, True), 60)
            except Exception as e:
                self.release_error = short_error(e) or type(e).__name__

    def describe(self):
        return {
            "kind": "compiled",
            "state": self.state,
            "lanes": len(self.lanes),
            "max_in_flight_per_lane": self.inflight,
            "in_flight_per_lane": [ln.get("in_flight") for ln in self.lanes],
            "cross_node_in_flight": CROSS_NODE_IN_FLIGHT,
            "rebuilds": self.rebuilds,
            "last_failure": self.last_failure,
            "waiting_for": self.waiting,
            "idle_releases": self.idle_releases,
            "idle_release_after_s": PLANE_IDLE_S,
            "release_error": self.release_error,
            "parts_niceness": self.parts_niceness,
            "waits_as_idle": {
                "parts": self.parts_wait_as_idle,
                "parts_after_quiet_s": WAIT_QUIET_S if WAIT_AS_IDLE else None,
                "ingress_readers": len(self.reader_tids),
            },
        }

    def part_reports(self):
        for lane in self.lanes:
            if lane["reports"]:
                return lane["reports"]
        return []


async def _gather(futures):
    """Every result of one execution, all read even when one is an error (an unread result
    stays buffered in the graph), the first error raised."""
    results, first = [], None
    for f in futures if isinstance(futures, list) else [futures]:
        try:
            value = await f
        except Exception as e:
            first = first or e
            continue
        # A channel closed under a read hands its error back as the value, not raised.
        if isinstance(value, Exception):
            first = first or value
        else:
            results.append(value)
    if first is not None:
        raise first
    return results


def _plane_broken(e):
    for x in (e, innermost(e)):
        for cls in type(x).__mro__:
            if cls.__name__ in _PLANE_BROKEN:
                return True
    # Ray's own words for a graph it tore down: its input writer closed ("DAG execution
    # cancelled", a plain RuntimeError) or its channels. A channel closed under the result
    # reader reaches the awaiting request as a TypeError naming the error that Ray 2.60's
    # result cache tried to iterate ("'RayChannelError' object is not iterable").
    words = ("torn down", "DAG execution cancelled", *(f"'{n}'" for n in _PLANE_BROKEN))
    return any(w in str(x) for x in (e, innermost(e)) for w in words)


def _broken_cause(e):
    """Ray's error for a broken graph in one line: Ray 2.60's own text where it raised one, and
    for the TypeError its result cache raises on a closed channel, the error it was handed."""
    for x in (e, innermost(e)):
        if any(c.__name__ in _PLANE_BROKEN for c in type(x).__mro__):
            return short_error(x)
    for name in _PLANE_BROKEN:
        if f"'{name}'" in str(e):
            return f"{name}: a channel closed while the ingress read a result"
    return short_error(e)


def _broken_error(e):
    """What a request that met a broken graph is told."""
    return f"the compiled data plane broke ({_broken_cause(e)}); it is being rebuilt"

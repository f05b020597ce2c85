"""The cost model's parameters (the alpha-beta-gamma terms, one number each) and how an exchange's
time follows from them.

An exchange is a sequence of phases. In a phase the links carry bytes while the cores do the
work around them (TCP's copies, shared memory, reductions); each is a cost vector (how much of
each term it incurs: messages, bytes, reduced bytes, ...) whose time is its dot product with the
parameters. Several links or cores work at once, so the busiest link takes `w` and the busiest
core `c`; hora streams a message in chunks, so the two overlap, but not perfectly: a phase takes
(w^p + c^p)^(1/p) with p = OVERLAP, which is the slower of the two when the other is small and
up to 2^(1/p) times it when they are equal (p = 3: 26% more). A phase may also wait: when its
processes outnumber the cores, a hand-off finds its peer off a core and waits for the scheduler,
and meanwhile neither its link nor its core moves, so the longest wait is added, not overlapped
(cluster.py, Cluster.cpu). The time is homogeneous of degree 1
in the parameters, so it equals the parameters' dot product with its gradient (binding()): the
fit (fit.py) solves that linear problem and repeats until the gradient stops changing.
"""

import dataclasses
import json
from typing import NamedTuple, Tuple

import numpy as np

# The terms, in the order of a cost vector:
#   alpha_net   seconds per message between hosts (TCP)
#   wire        slowdown of the link against its nominal rate (1 = the nominal Gbit/s); the
#               cost is the bytes a link must carry, in seconds at the nominal rate
#   beta_tcp    seconds of a core per byte a process sends or receives through TCP (kernel
#               copies, the virtual link's work): what a fast link still costs the CPU
#   alpha_shm   seconds per message between ranks of one host (shared memory)
#   beta_shm    seconds per byte sent through shared memory, the data in the cache
#   gamma       seconds per byte reduced (a += b, float32), the data in the cache
#   mem         seconds added per byte copied or reduced whose data is not in the cache
#   alpha_ps    seconds per message of a parameter-server exchange (a push or a reply)
#   sched       seconds a hand-off (a chunk passed to or taken from a peer) waits for the peer to
#               be scheduled, counted for the share of hand-offs that find it off a core
TERMS = ("alpha_net", "wire", "beta_tcp", "alpha_shm", "beta_shm", "gamma", "mem", "alpha_ps", "sched")


def costs(**amounts):
    """A cost vector: how much of each term (TERMS) a resource incurs; unnamed terms are 0."""
    unknown = set(amounts) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown cost terms {sorted(unknown)}; the terms are {TERMS}")
    return np.array([float(amounts.get(t, 0.0)) for t in TERMS])


OVERLAP = 3.0  # p above: 2, 3, 4 and the plain maximum compared in docs/benchmarks/cost_model.md


class Phase(NamedTuple):
    """`times` repetitions of a step: the links' and the cores' work (cost vectors) at once, and
    the processes' waits for a core, which stall both (the longest is added)."""
    links: Tuple[np.ndarray, ...]
    cores: Tuple[np.ndarray, ...]
    times: float = 1.0
    waits: Tuple[np.ndarray, ...] = ()


def phase(links=(), cores=(), times=1.0, waits=()):
    """An exchange of one phase (exchanges are lists of phases, joined with +)."""
    return [Phase(tuple(links), tuple(cores), float(times), tuple(waits))] if times else []


def _busiest(lanes, theta):
    """(seconds, cost vector) of the busiest lane."""
    if not lanes:
        return 0.0, None
    return max(((float(np.dot(theta, lane)), lane) for lane in lanes), key=lambda t: t[0])


def _overlapped(p, theta):
    """(seconds, gradient) of the links and the cores of phase p working at once."""
    w, link = _busiest(p.links, theta)
    c, core = _busiest(p.cores, theta)
    if w <= 0.0 or c <= 0.0:  # one side only: it alone sets the time
        lane = link if w >= c else core
        return max(w, c), (lane if lane is not None else np.zeros_like(theta))
    total = (w ** OVERLAP + c ** OVERLAP) ** (1 / OVERLAP)
    return total, (w / total) ** (OVERLAP - 1) * link + (c / total) ** (OVERLAP - 1) * core


def phase_time(p, theta):
    """(seconds, gradient in the parameters) of one repetition of phase p."""
    seconds, gradient = _overlapped(p, theta)
    wait, lane = _busiest(p.waits, theta)
    return (seconds + wait, gradient + lane) if lane is not None else (seconds, gradient)


@dataclasses.dataclass(frozen=True)
class Params:
    alpha_net: float = 0.0
    wire: float = 1.0
    beta_tcp: float = 0.0
    alpha_shm: float = 0.0
    beta_shm: float = 0.0
    gamma: float = 0.0
    mem: float = 0.0
    alpha_ps: float = 0.0
    sched: float = 0.0

    def vector(self):
        return np.array([getattr(self, t) for t in TERMS])

    def seconds(self, exchange):
        """The time of an exchange (a list of phases)."""
        theta = self.vector()
        return float(sum(p.times * phase_time(p, theta)[0] for p in exchange))

    def binding(self, exchange):
        """The exchange's time as a cost vector at these parameters: its gradient, whose dot
        product with them is the time (what the fit linearises around)."""
        theta = self.vector()
        return sum((p.times * phase_time(p, theta)[1] for p in exchange), costs())

    def to_json(self):
        return {t: getattr(self, t) for t in TERMS}

    @classmethod
    def from_json(cls, values):
        return cls(**{t: float(values.get(t, getattr(cls, t))) for t in TERMS})

    @classmethod
    def load(cls, path):
        with open(path) as f:
            document = json.load(f)
        return cls.from_json(document.get("params", document))

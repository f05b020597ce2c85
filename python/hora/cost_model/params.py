"""The cost model's parameters: the alpha-beta-gamma terms, one number each.

A predicted time is a dot product: an exchange is described by how much of each term it incurs
(its Costs: messages, bytes, reduced bytes, ...), and the parameters say what one unit of each
costs on this machine. That keeps every formula linear in the parameters, so fitting them is
a linear least-squares problem (fit.py).
"""

import dataclasses
import json

import numpy as np

# The terms, in the order of a cost vector:
#   alpha_net   seconds per message between hosts (TCP)
#   wire        slowdown of the link against its nominal rate (1 = the nominal Gbit/s); the
#               cost is the bytes a link must carry, in seconds at the nominal rate
#   beta_tcp    seconds per byte a process sends through TCP on top of the wire (CPU: kernel
#               copies), so that a fast link still costs what the CPU spends on it
#   alpha_shm   seconds per message between ranks of one host (shared memory)
#   beta_shm    seconds per byte sent through shared memory
#   gamma       seconds per byte reduced (a += b, float32)
#   alpha_ps    seconds per message of a parameter-server exchange (a push or a reply)
TERMS = ("alpha_net", "wire", "beta_tcp", "alpha_shm", "beta_shm", "gamma", "alpha_ps")


def costs(**amounts):
    """A cost vector: how much of each term (TERMS) an exchange incurs; unnamed terms are 0."""
    unknown = set(amounts) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown cost terms {sorted(unknown)}; the terms are {TERMS}")
    return np.array([float(amounts.get(t, 0.0)) for t in TERMS])


@dataclasses.dataclass(frozen=True)
class Params:
    alpha_net: float = 0.0
    wire: float = 1.0
    beta_tcp: float = 0.0
    alpha_shm: float = 0.0
    beta_shm: float = 0.0
    gamma: float = 0.0
    alpha_ps: float = 0.0

    def vector(self):
        return np.array([getattr(self, t) for t in TERMS])

    def seconds(self, cost_vector):
        """The time of an exchange whose cost vector this is."""
        return float(np.dot(self.vector(), cost_vector))

    def to_json(self):
        return {t: getattr(self, t) for t in TERMS}

    @classmethod
    def from_json(cls, values):
        return cls(**{t: float(values[t]) for t in TERMS})

    @classmethod
    def load(cls, path):
        with open(path) as f:
            document = json.load(f)
        return cls.from_json(document.get("params", document))

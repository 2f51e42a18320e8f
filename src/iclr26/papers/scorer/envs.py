"""Environments: gymnasium's own implementations, vectorised over seeds x envs, and their checks.

Every environment here is a gymnasium VectorEnv with gymnasium's default NEXT_STEP autoreset:
the step after an episode ends (terminated or truncated) resets that sub-env, ignores its action
and returns its first observation with reward 0. The training loop drops that transition.

Implementations (config `data.<slot>.impl`):
    native   gymnasium.make_vec(id, vectorization_mode="vector_entry_point") - CartPole's own
             numpy-vectorised env (~0.1 ms per step for 64 envs)
    batched  AcrobotVectorEnv below: gymnasium's Acrobot equations (book dynamics, RK4, dt 0.2)
             over all sub-envs at once, because SyncVectorEnv of 64 Acrobots costs ~4 ms per step;
             `check_against_gymnasium` steps it beside gymnasium.make("Acrobot-v1") in prepare
    sync     gymnasium's SyncVectorEnv of gymnasium.make(id): the reference, and the MinAtar path
             (`minatar` package, ids "MinAtar/<Game>-v1")
`distractor_dims > 0` appends that many i.i.d. N(0, 1) dimensions to every observation.
"""
from __future__ import annotations

import functools
import importlib
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv, VectorObservationWrapper
from gymnasium.vector.utils import batch_space

from iclr26.core.errors import ConfigError, DataError


# ----------------------------------------------------------------------------- Acrobot, batched
class AcrobotVectorEnv(VectorEnv):
    """gymnasium's AcrobotEnv + TimeLimit(500), vectorised in numpy; same state layout and equations.

    State [N, 4] = (theta1, theta2, dtheta1, dtheta2), float64 as in gymnasium after the first step.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}
    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1, MAX_VEL_2 = 4 * math.pi, 9 * math.pi
    AVAIL_TORQUE = np.array([-1.0, 0.0, 1.0])

    def __init__(self, num_envs: int = 1, max_episode_steps: int = 500):
        self.num_envs, self.max_episode_steps = num_envs, max_episode_steps
        high = np.array([1.0, 1.0, 1.0, 1.0, self.MAX_VEL_1, self.MAX_VEL_2], dtype=np.float32)
        self.single_observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = spaces.Discrete(3)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.state = None
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.prev_done = np.zeros(num_envs, dtype=bool)

    def _initial_state(self, n: int) -> np.ndarray:
        # gymnasium: uniform(-0.1, 0.1, size=(4,)).astype(float32)
        return self.np_random.uniform(-0.1, 0.1, size=(n, 4)).astype(np.float32).astype(np.float64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self._initial_state(self.num_envs)
        self.steps[:] = 0
        self.prev_done[:] = False
        return self._obs(), {}

    def _dsdt(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Book dynamics (gymnasium's default book_or_nips='book'), s [N, 4], torque a [N]."""
        m1, m2, l1 = self.LINK_MASS_1, self.LINK_MASS_2, self.LINK_LENGTH_1
        lc1, lc2, I1, I2, g = self.LINK_COM_POS_1, self.LINK_COM_POS_2, self.LINK_MOI, self.LINK_MOI, 9.8
        theta1, theta2, dtheta1, dtheta2 = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * np.cos(theta2)) + I2
        phi2 = m2 * lc2 * g * np.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * np.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * np.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * np.cos(theta1 - math.pi / 2) + phi2)
        ddtheta2 = ((a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * np.sin(theta2) - phi2)
                    / (m2 * lc2**2 + I2 - d2**2 / d1))
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return np.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], axis=1)

    def _rk4(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        dt, dt2 = self.dt, self.dt / 2.0
        k1 = self._dsdt(s, a)
        k2 = self._dsdt(s + dt2 * k1, a)
        k3 = self._dsdt(s + dt2 * k2, a)
        k4 = self._dsdt(s + dt * k3, a)
        return s + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

    @staticmethod
    def _wrap(x: np.ndarray, m: float, M: float) -> np.ndarray:
        """gymnasium's wrap(): repeated +-(M - m) until m <= x <= M (x == M stays M)."""
        diff = M - m
        x = x.copy()
        while (above := x > M).any():
            x[above] -= diff
        while (below := x < m).any():
            x[below] += diff
        return x

    def step(self, actions):
        actions = np.asarray(actions)
        ns = self._rk4(self.state, self.AVAIL_TORQUE[actions])
        ns[:, 0] = self._wrap(ns[:, 0], -math.pi, math.pi)
        ns[:, 1] = self._wrap(ns[:, 1], -math.pi, math.pi)
        ns[:, 2] = np.clip(ns[:, 2], -self.MAX_VEL_1, self.MAX_VEL_1)
        ns[:, 3] = np.clip(ns[:, 3], -self.MAX_VEL_2, self.MAX_VEL_2)
        self.state = ns
        terminated = -np.cos(ns[:, 0]) - np.cos(ns[:, 1] + ns[:, 0]) > 1.0
        reward = np.where(terminated, 0.0, -1.0)
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps  # TimeLimit: both can be true at step 500

        # next-step autoreset, as gymnasium's vector envs: the reset step has reward 0 and no ending
        reset = self.prev_done
        if reset.any():
            self.state[reset] = self._initial_state(int(reset.sum()))
            self.steps[reset] = 0
            reward[reset], terminated[reset], truncated[reset] = 0.0, False, False
        self.prev_done = terminated | truncated
        return self._obs(), reward, terminated, truncated, {}

    def _obs(self) -> np.ndarray:
        s = self.state
        return np.stack([np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]), s[:, 2], s[:, 3]],
                        axis=1).astype(np.float32)


# ----------------------------------------------------------------------------- distractor wrapper
class DistractorDims(VectorObservationWrapper):
    """Append `n` i.i.d. N(0, 1) dimensions to each observation (card 08, Sec. 6.1): features the
    perception network must learn to ignore. The noise has its own generator, seeded in reset()."""

    def __init__(self, env: VectorEnv, n: int):
        super().__init__(env)
        self.n = int(n)
        low = np.concatenate([env.single_observation_space.low, np.full(self.n, -np.inf, np.float32)])
        high = np.concatenate([env.single_observation_space.high, np.full(self.n, np.inf, np.float32)])
        self.single_observation_space = spaces.Box(low, high, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)
        self.noise_rng = np.random.default_rng()

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.noise_rng = np.random.default_rng([int(seed), 0xD15])
        return super().reset(seed=seed, options=options)

    def observations(self, observations: np.ndarray) -> np.ndarray:
        noise = self.noise_rng.standard_normal((observations.shape[0], self.n), dtype=np.float32)
        return np.concatenate([observations.astype(np.float32), noise], axis=1)


# ----------------------------------------------------------------------------- construction
def register_minatar(env_id: str) -> None:
    """Make the MinAtar gymnasium ids ("MinAtar/Breakout-v1") available; one clear error if absent."""
    if env_id in gym.registry:
        return
    try:
        minatar_gym = importlib.import_module("minatar.gym")
    except ImportError:
        raise DataError(f"environment {env_id} needs the 'minatar' package (pip install minatar), "
                        "which is not installed") from None
    minatar_gym.register_envs()
    if env_id not in gym.registry:
        raise DataError(f"the installed minatar package does not register {env_id}")


def make_kwargs(spec: dict) -> dict[str, Any]:
    """Keyword arguments of gymnasium.make for one slot: `make_kwargs` (e.g. MinAtar's
    sticky_action_prob) and `max_episode_steps` (a TimeLimit), where the config sets them."""
    kwargs = dict(spec.get("make_kwargs") or {})
    if spec.get("max_episode_steps") is not None:
        kwargs["max_episode_steps"] = int(spec["max_episode_steps"])
    return kwargs


def make_vec_env(spec: dict, num_envs: int) -> VectorEnv:
    """The vector env of one dataset slot: `spec` = data.<slot> of the config."""
    env_id, impl = spec["env_id"], spec.get("impl", "native")
    if env_id.startswith("MinAtar/"):
        register_minatar(env_id)
    kwargs = make_kwargs(spec)
    if kwargs and impl != "sync":
        raise ConfigError(f"data.<slot>.make_kwargs / max_episode_steps need impl=sync, not {impl!r}")
    if impl == "native":
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    elif impl == "batched":
        if env_id != "Acrobot-v1":
            raise ConfigError(f"impl=batched exists for Acrobot-v1 only, not {env_id}")
        env = AcrobotVectorEnv(num_envs, max_episode_steps=gym.spec(env_id).max_episode_steps)
    elif impl == "sync":  # = gym.make_vec(id, vectorization_mode="sync"), with picklable env makers
        env = gym.vector.SyncVectorEnv([functools.partial(gym.make, env_id, **kwargs) for _ in range(num_envs)])
    else:
        raise ConfigError(f"data.<slot>.impl must be native, batched or sync, not {impl!r}")
    if spec.get("distractor_dims", 0):
        env = DistractorDims(env, spec["distractor_dims"])
    return env


def describe(spec: dict) -> dict[str, Any]:
    """What acquire records: the environment as gymnasium defines it, plus our additions."""
    if spec["env_id"].startswith("MinAtar/"):
        register_minatar(spec["env_id"])
    try:
        ref = gym.make(spec["env_id"], **make_kwargs(spec))
    except gym.error.Error as err:
        raise DataError(f"gymnasium cannot make {spec['env_id']}: {err}") from None
    reg = gym.spec(spec["env_id"])
    info = {
        "env_id": spec["env_id"],
        "source": spec.get("source"),
        "gymnasium_version": gym.__version__,
        "entry_point": str(reg.entry_point),
        "vector_entry_point": str(reg.vector_entry_point) if reg.vector_entry_point else None,
        "max_episode_steps": spec.get("max_episode_steps") or reg.max_episode_steps,
        "make_kwargs": dict(spec.get("make_kwargs") or {}),
        "observation_space": str(ref.observation_space),
        "obs_shape": list(ref.observation_space.shape),
        "obs_dtype": str(ref.observation_space.dtype),
        "action_space": str(ref.action_space),
        "n_actions": int(ref.action_space.n),
        "distractor_dims": int(spec.get("distractor_dims", 0)),
        "impl": spec.get("impl", "native"),
    }
    ref.close()
    return info


def obs_dim(env: VectorEnv) -> int:
    return int(np.prod(env.single_observation_space.shape))


# ----------------------------------------------------------------------------- state for checkpoints
# A checkpoint is read back with torch.load(weights_only=True), and nothing in it may run code when it
# is restored (audit 2026-12-02, H8: the MinAtar envs used to go in pickled, and a planted pickle ran).
# So an env's state is saved as plain data only (None, bool, int, float, str, lists and dicts with a
# "kind") and arrays as their raw bytes, and it is restored by *setting attributes of a freshly made
# env of the same spec*: the file gives values (plain data, arrays, RNG states), never a class to build
# or code to run.
class EnvStateError(ValueError):
    """A saved env state this code does not restore (made by other code, or tampered with)."""


_NATIVE_KEYS = {"state", "steps", "prev_done", "np_random"}   # CartPoleVectorEnv, AcrobotVectorEnv
_SYNC_KEYS = {"autoreset", "envs", "rngs"}                      # SyncVectorEnv (MinAtar at full scale)
# gymnasium seeds PCG64 Generators, MinAtar MT19937 RandomStates; no other bit generator is rebuilt
_BIT_GENERATORS = {"PCG64": np.random.PCG64, "MT19937": np.random.MT19937}


def env_state(env: VectorEnv) -> dict[str, Any]:
    """What a vector env carries from one step to the next, as numpy arrays and plain data."""
    state = {}
    if isinstance(env, DistractorDims):
        state["noise_rng"] = env.noise_rng.bit_generator.state
        env = env.env
    if isinstance(env, gym.vector.SyncVectorEnv):
        # The next step reads only _autoreset_envs of the vector env itself (its reward, flag and
        # observation buffers are rewritten before they are read); the rest is in the sub-envs.
        rngs: list = []
        state.update(autoreset=env._autoreset_envs.copy(), envs=[_object_state(e, rngs) for e in env.envs])
        state["rngs"] = [_rng_state(r) for r in rngs]
    else:  # CartPoleVectorEnv, AcrobotVectorEnv: arrays, and the generator of their resets
        state.update(state=np.array(env.state), steps=env.steps.copy(), prev_done=env.prev_done.copy(),
                     np_random=env.np_random.bit_generator.state)
    return state


def restore_env_state(env: VectorEnv, state: dict[str, Any]) -> VectorEnv:
    """Put `env` (made by make_vec_env from the same spec, not stepped) in `state`; returns the env to
    step. EnvStateError when `state` is not one that env_state wrote for such an env: then nothing of
    `state` has been set (a SyncVectorEnv may have been reset), and the caller starts fresh."""
    outer = env
    expected = set()
    if isinstance(env, DistractorDims):
        expected.add("noise_rng")
        env = env.env
    sync = isinstance(env, gym.vector.SyncVectorEnv)
    expected |= _SYNC_KEYS if sync else _NATIVE_KEYS
    if not isinstance(state, dict) or set(state) != expected:
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise EnvStateError(f"env state has keys {got}, not {sorted(expected)}")
    try:   # everything is decoded and checked before anything is set: a refused state changes nothing
        noise = _generator(state["noise_rng"]) if outer is not env else None
        if sync:
            assignments = _sync_assignments(env, state)
        else:
            np_random = _generator(state["np_random"])
            arrays = [np.array(state[k]) for k in ("state", "steps", "prev_done")]
    except (KeyError, IndexError, TypeError, ValueError) as err:   # EnvStateError is a ValueError
        raise EnvStateError(str(err)) from None
    if noise is not None:
        outer.noise_rng = noise
    if sync:
        for obj, name, value in assignments:
            setattr(obj, name, value)
    else:
        (env.state, env.steps, env.prev_done), env.np_random = arrays, np_random
    return outer


def _sync_assignments(env: gym.vector.SyncVectorEnv, state: dict) -> list[tuple[Any, str, Any]]:
    """The attributes to set on `env` and its sub-envs, decoded and checked against them."""
    # reset first: gymnasium creates some attributes (the Generator of a reset) only then, and a
    # restored env must have the same attributes as the stepped one (every one is overwritten below)
    env.reset(seed=0)
    if len(state["envs"]) != len(env.envs):
        raise EnvStateError(f"env state has {len(state['envs'])} sub-envs, not {len(env.envs)}")
    rngs = [_rebuild_rng(r) for r in state["rngs"]]
    autoreset = np.array(state["autoreset"])
    if autoreset.shape != env._autoreset_envs.shape or autoreset.dtype != np.bool_:
        raise EnvStateError("env state: autoreset flags of another shape or type")
    assignments = [(env, "_autoreset_envs", autoreset.copy())]
    for sub, saved in zip(env.envs, state["envs"]):
        _plan_object(sub, saved, rngs, assignments)
    return assignments


# -- the objects of one gymnasium sub-env: its wrappers, the env, and (MinAtar) the game objects
def _is_part(value) -> bool:
    """An object whose attributes are saved one by one: a gymnasium env or wrapper, or one of the
    MinAtar package's objects (minatar.Environment and its game)."""
    return isinstance(value, gym.Env) or type(value).__module__.split(".")[0] == "minatar"


# made by the constructor and never changed by stepping: not saved (a space's own generator only
# serves space.sample(), which training never calls)
_CONSTANT_TYPES = (spaces.Space, gym.envs.registration.EnvSpec)


def _class_name(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _object_state(obj, rngs: list) -> dict:
    """obj's instance attributes as plain data: its parts in "parts", the rest in "attrs". Anything
    that is neither plain data, an RNG, a part nor a known constant raises: a new package version
    that keeps state in another kind of object must fail here, not resume wrongly."""
    attrs, parts = {}, {}
    for name, value in vars(obj).items():
        if _is_part(value):
            parts[name] = _object_state(value, rngs)
        elif not isinstance(value, _CONSTANT_TYPES):
            try:
                attrs[name] = _encode(value, rngs)
            except EnvStateError as err:
                raise EnvStateError(f"{_class_name(obj)}.{name}: {err}") from None
    return {"kind": "object", "class": _class_name(obj), "attrs": attrs, "parts": parts}


def _plan_object(obj, saved, rngs: list, assignments: list) -> None:
    """Check `saved` against the fresh `obj` (same class, the same attributes) and add its decoded
    attributes to `assignments`; the class name is only compared, never imported."""
    if not isinstance(saved, dict) or saved.get("kind") != "object" or saved.get("class") != _class_name(obj):
        raise EnvStateError(f"env state for {saved.get('class') if isinstance(saved, dict) else saved!r}, "
                            f"not {_class_name(obj)}")
    fresh = _object_state(obj, [])
    for group in ("attrs", "parts"):
        if set(saved[group]) != set(fresh[group]):
            raise EnvStateError(f"{_class_name(obj)}: saved {group} {sorted(saved[group])}, "
                                f"this version has {sorted(fresh[group])}")
    for name, node in saved["attrs"].items():
        assignments.append((obj, name, _decode(node, rngs)))
    for name, node in saved["parts"].items():
        _plan_object(getattr(obj, name), node, rngs, assignments)


# -- plain data: values as they are, containers and arrays as dicts with a "kind"
def _encode(value, rngs: list):
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (np.ndarray, np.generic)):   # raw bytes keep every dtype (uint32, bool_, ...) exact
        arr = np.ascontiguousarray(value)
        if arr.dtype.kind not in "biufc":
            raise EnvStateError(f"cannot save an array of dtype {arr.dtype}")
        return {"kind": "array" if isinstance(value, np.ndarray) else "scalar", "dtype": arr.dtype.str,
                "shape": list(arr.shape), "bytes": arr.reshape(-1).view(np.uint8).copy()}
    if type(value) is list:
        return [_encode(v, rngs) for v in value]
    if type(value) is tuple:
        return {"kind": "tuple", "items": [_encode(v, rngs) for v in value]}
    if type(value) is dict:
        return {"kind": "dict", "items": [[_encode(k, rngs), _encode(v, rngs)] for k, v in value.items()]}
    if isinstance(value, (np.random.RandomState, np.random.Generator)):
        # by identity: a seeded minatar.Environment and its game draw from one RandomState, and a
        # restored pair must share one again (two equal copies would give other draws)
        index = next((i for i, r in enumerate(rngs) if r is value), None)
        if index is None:
            index = len(rngs)
            rngs.append(value)
        return {"kind": "rng", "index": index}
    raise EnvStateError(f"cannot save a {type(value).__module__}.{type(value).__qualname__} as plain data")


def _decode(node, rngs: list):
    if node is None or type(node) in (bool, int, float, str):
        return node
    if type(node) is list:
        return [_decode(n, rngs) for n in node]
    kind = node.get("kind") if type(node) is dict else None
    if kind in ("array", "scalar"):
        dtype = np.dtype(str(node["dtype"]))
        if dtype.kind not in "biufc":   # no object arrays (their items would be pickles)
            raise EnvStateError(f"env state holds an array of dtype {dtype}")
        raw = np.asarray(node["bytes"]).astype(np.uint8, casting="equiv").tobytes()
        arr = np.frombuffer(raw, dtype=dtype).reshape([int(n) for n in node["shape"]]).copy()
        return arr if kind == "array" else arr[()]
    if kind == "tuple":
        return tuple(_decode(n, rngs) for n in node["items"])
    if kind == "dict":
        return {_decode(k, rngs): _decode(v, rngs) for k, v in node["items"]}
    if kind == "rng":
        return rngs[int(node["index"])]
    raise EnvStateError(f"env state holds an unknown node {str(node)[:80]}")


def _rng_state(rng) -> dict:
    if isinstance(rng, np.random.RandomState):
        return {"type": "RandomState", "state": _encode(rng.get_state(legacy=False), [])}
    return {"type": "Generator", "state": _encode(rng.bit_generator.state, [])}


def _rebuild_rng(saved: dict):
    """A new RandomState or Generator (the only types built from a checkpoint) in the saved state."""
    state = _decode(saved["state"], [])
    if saved["type"] == "RandomState":
        rng = np.random.RandomState()
        rng.set_state(state)
        return rng
    if saved["type"] == "Generator":
        return _generator(state)
    raise EnvStateError(f"env state holds an RNG of type {saved['type']!r}")


def _generator(bit_state: dict) -> np.random.Generator:
    name = bit_state["bit_generator"]
    if name not in _BIT_GENERATORS:
        raise EnvStateError(f"env state holds a {name!r} generator")
    gen = np.random.Generator(_BIT_GENERATORS[name]())
    gen.bit_generator.state = bit_state
    return gen


# ----------------------------------------------------------------------------- check vs gymnasium
def _set_reference_state(ref: gym.Env, state: np.ndarray, steps: int) -> None:
    ref.unwrapped.state = state.copy()
    ref.unwrapped.steps_beyond_terminated = None
    env = ref
    while hasattr(env, "env"):  # the TimeLimit wrapper keeps the episode's step count
        if isinstance(env, gym.wrappers.TimeLimit):
            env._elapsed_steps = int(steps)
        env = env.env


def _check_actions(env_id: str, obs: np.ndarray, rng: np.random.Generator, n_actions: int) -> np.ndarray:
    """Random actions; on Acrobot 70% of them pump energy (torque along dtheta2) so that episodes
    also *terminate* (a random policy only ever hits the time limit)."""
    actions = rng.integers(0, n_actions, size=len(obs))
    if env_id.startswith("Acrobot"):
        pump = np.where(obs[:, 5] > 0, 2, 0)
        actions = np.where(rng.random(len(obs)) < 0.7, pump, actions)
    return actions


def check_against_gymnasium(spec: dict, n_steps: int, num_envs: int = 8, seed: int = 0) -> dict:
    """Step the training env beside gymnasium.make(env_id) and return the largest deviation.

    native / batched (classic control): before every step each reference env is put in the same
    state as the vector sub-env, both take the same random action, and observation, reward,
    terminated and truncated are compared. One-step comparisons, so the chaotic Acrobot cannot
    amplify rounding differences. sync: reference envs seeded like the SyncVectorEnv sub-envs
    (seed + i) must follow identical trajectories.
    """
    impl = spec.get("impl", "native")
    vec = make_vec_env({**spec, "distractor_dims": 0}, num_envs)
    refs = [gym.make(spec["env_id"], **make_kwargs(spec)) for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    obs, _ = vec.reset(seed=seed)
    ref_obs = np.stack([r.reset(seed=seed + i)[0] for i, r in enumerate(refs)])  # sync seeds sub-env i with seed+i
    max_dev = float(np.abs(obs.astype(np.float64) - ref_obs).max()) if impl == "sync" else 0.0
    if impl != "sync":  # half the sub-envs start 10 steps before the time limit: compare truncation too
        vec.unwrapped.steps[: num_envs // 2] = vec.unwrapped.max_episode_steps - 10
    mismatches, terminations, truncations = 0, 0, 0
    prev_done = np.zeros(num_envs, dtype=bool)
    for _ in range(n_steps):
        actions = _check_actions(spec["env_id"], obs, rng, int(vec.single_action_space.n))
        if impl != "sync":
            state = np.asarray(vec.unwrapped.state)
            state = state if isinstance(vec.unwrapped, AcrobotVectorEnv) else state.T  # CartPole keeps [4, N]
            steps = np.asarray(vec.unwrapped.steps)
            for i, r in enumerate(refs):
                if not prev_done[i]:
                    _set_reference_state(r, state[i], steps[i])
        obs, reward, terminated, truncated, _ = vec.step(actions)
        for i, r in enumerate(refs):
            if prev_done[i]:  # the vector env's reset step; restart the reference from its state
                if impl == "sync":
                    ref_o, _ = r.reset()
                    max_dev = max(max_dev, float(np.abs(obs[i].astype(np.float64) - ref_o).max()))
                else:
                    r.reset()
                continue
            ref_o, ref_r, ref_te, ref_tr, _ = r.step(int(actions[i]))
            max_dev = max(max_dev, float(np.abs(obs[i].astype(np.float64) - ref_o).max()),
                          abs(float(reward[i]) - float(ref_r)))
            mismatches += int(bool(terminated[i]) != bool(ref_te)) + int(bool(truncated[i]) != bool(ref_tr))
        prev_done = terminated | truncated
        terminations, truncations = terminations + int(terminated.sum()), truncations + int(truncated.sum())
    vec.close()
    for r in refs:
        r.close()
    return {"steps": n_steps, "num_envs": num_envs, "max_abs_deviation": max_dev,
            "flag_mismatches": mismatches, "terminations": terminations, "truncations": truncations}


def check_training_env(spec: dict, steps: int, num_envs: int, tolerance: float) -> dict:
    """prepare's check of one slot: the training env stepped beside gymnasium.make(env_id), and the
    moments of the distractor dimensions (N(0, 1), appended after the env's own)."""
    check = check_against_gymnasium(spec, steps, num_envs)
    dims = int(spec.get("distractor_dims", 0))
    if dims:
        env = make_vec_env(spec, 64)
        obs, _ = env.reset(seed=0)
        noise = np.concatenate([obs[:, -dims:]] + [env.step(np.zeros(64, dtype=np.int64))[0][:, -dims:]
                                                   for _ in range(20)])
        check["distractor_mean"], check["distractor_std"] = float(noise.mean()), float(noise.std())
        check["obs_dim"] = obs_dim(env)
    check["tolerance"] = tolerance
    check["passed"] = check["max_abs_deviation"] <= tolerance and check["flag_mismatches"] == 0
    return check

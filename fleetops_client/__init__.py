"""fleetops-client: what a training job reports to FleetOps (steps, checkpoints, restores, per-rank step times and
gradient norms), sent by a background thread that never holds the training loop up. docs/CLIENT.md says how to use
it; it needs nothing beyond Python's standard library (PyTorch, Lightning and Transformers only for their helpers)."""

from fleetops_client.client import CheckpointWrite, Client
from fleetops_client.config import Config

__version__ = "0.1.0"
__all__ = ["CheckpointWrite", "Client", "Config", "init"]


def init(**overrides) -> Client:
    """A client configured from the environment (FLEETOPS_URL, FLEETOPS_TOKEN, the run, rank and node)."""
    return Client.from_env(**overrides)

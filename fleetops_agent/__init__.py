"""fleetops-agent: a node agent that reads NVML and posts CloudEvents to the FleetOps event API."""

__version__ = "0.1.0"

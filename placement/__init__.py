"""Placement groups and resource bundles for client actors."""

from placement.groups import PlacementError, assign_clients, bundle_strategy, client_bundles, cluster_has_gpus, reserve

__all__ = ["PlacementError", "assign_clients", "bundle_strategy", "client_bundles", "cluster_has_gpus", "reserve"]

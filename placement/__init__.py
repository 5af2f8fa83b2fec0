"""Placement groups and resource bundles for client actors."""

from placement.groups import PlacementError, bundle_strategy, client_bundles, cluster_has_gpus, reserve

__all__ = ["PlacementError", "bundle_strategy", "client_bundles", "cluster_has_gpus", "reserve"]

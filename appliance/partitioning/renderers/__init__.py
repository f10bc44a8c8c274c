"""Configuration text generated from the inventory: Slurm, Kubernetes, storage clients, GPUDirect, fabric.

Every renderer is a pure function of a `SiteView` (a frozen snapshot of the inventory, see `site.py`) and
returns text with a stable order, so that rendering twice gives byte-identical files and a rerun of a stage
changes nothing.
"""

from .site import FilesystemView, GpuView, NetworkView, NodeView, PoolView, PortView, SiteView, site_view

__all__ = ["FilesystemView", "GpuView", "NetworkView", "NodeView", "PoolView", "PortView", "SiteView", "site_view"]

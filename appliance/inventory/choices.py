"""The inventory's fixed sets of values and their defaults, defined once (as NetBox's choices.py).

The site definition parser, the models, the stage catalogue, the renderers and the portal import
these rather than spelling the values again.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _


class NodeRole(models.TextChoices):
    GPU = "gpu", _("GPU server")
    STORAGE = "storage", _("Storage server")
    MANAGEMENT = "management", _("Management node")
    LOGIN = "login", _("Login node")


NODE_ROLES: tuple[str, ...] = tuple(NodeRole.values)

# The roles whose nodes mount the parallel filesystem when the site does not say otherwise.
DEFAULT_STORAGE_CLIENT_ROLES: tuple[str, ...] = (NodeRole.GPU.value, NodeRole.LOGIN.value)


class SubnetManagerKind(models.TextChoices):
    OPENSM = "opensm", "opensm"
    EXTERNAL = "external", _("external (the fabric's switches or another host)")


# opensm's sm_priority: 0-15, the highest becomes master. A site that names an opensm node but no
# priority gets the highest, so that the appliance's own subnet manager wins over a switch's default.
OPENSM_PRIORITY_MIN, OPENSM_PRIORITY_MAX = 0, 15
DEFAULT_OPENSM_PRIORITY = 15


class HealthStatus(models.TextChoices):
    OK = "ok", _("ok")
    FAILING = "failing", _("failing")
    UNKNOWN = "unknown", _("unknown")


class ComponentKind(models.TextChoices):
    NODE = "node", _("node")
    GPU = "gpu", _("GPU")
    HCA_PORT = "hca_port", _("HCA port")
    MOUNT = "mount", _("mount")

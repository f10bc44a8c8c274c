"""Configuration file of one simulated BMC: sushy-emulator loads it with `--config` (Flask's
from_pyfile: every upper-case name becomes a setting). Its parameters come from the environment
appliance.simulation.bmc starts the emulator with.

libvirt's test:///default driver keeps its domains only while a connection is open, and the emulator
opens one per request: LIBVIRT_CONNECTION (an upper-case name, so Flask keeps it) holds one open for
the life of the process. The driver's sample domain `test` is removed and the node's server is
defined with an EFI firmware and a <devices> section (boot-override requests fail without them).

The process is bmc_driver.py (sushy-tools' own application with a systems driver that can stage BIOS
changes until a reset, per APPLIANCE_BMC_APPLY). The BMC's memory is the node's state file: at start the domain gets the BIOS attributes (factory
values at first start) and the power state recorded there, and a libvirt event callback writes every
BIOS change (PATCH .../BIOS/Settings redefines the domain) and power change back, so a restarted
emulator, like a real BMC's NVRAM, keeps what was set.
"""

import importlib
import os
import sys
import threading
import types
from pathlib import Path
from xml.etree import ElementTree

import libvirt

_SYSROOT = Path(os.environ["APPLIANCE_BMC_SYSROOT"])
# state.py and the pure modules beside it (cpus.py) as a package of their own, without importing the
# suite's package (which loads Django and Celery).
_package = types.ModuleType("appliance_bmc_simulation")
_package.__path__ = [str(Path(__file__).parent)]
sys.modules.setdefault("appliance_bmc_simulation", _package)
_state = importlib.import_module("appliance_bmc_simulation.state")

SUSHY_EMULATOR_LISTEN_IP = "127.0.0.1"
SUSHY_EMULATOR_LISTEN_PORT = int(os.environ["APPLIANCE_BMC_PORT"])
SUSHY_EMULATOR_SSL_CERT = os.environ["APPLIANCE_BMC_CERT"]
SUSHY_EMULATOR_SSL_KEY = os.environ["APPLIANCE_BMC_KEY"]
SUSHY_EMULATOR_AUTH_FILE = os.environ["APPLIANCE_BMC_AUTH_FILE"]
SUSHY_EMULATOR_LIBVIRT_URI = "test:///default"
# Read by bmc_driver.StagingLibvirtDriver: when BIOS changes take effect ("Immediate" or "OnReset").
APPLIANCE_BMC_APPLY = os.environ.get("APPLIANCE_BMC_APPLY", "Immediate")
APPLIANCE_BMC_SYSROOT = str(_SYSROOT)

_NAMESPACE = "http://openstack.org/xmlns/libvirt/sushy"
_initial = _state.load(_SYSROOT)
_NODE = _initial["node"]
SUSHY_EMULATOR_ALLOWED_INSTANCES = [_initial["bmc"]["system_uuid"]]


def _domain_xml(current: dict) -> str:
    ElementTree.register_namespace("sushy", _NAMESPACE)
    domain = ElementTree.Element("domain", type="test")
    ElementTree.SubElement(domain, "name").text = current["node"]
    ElementTree.SubElement(domain, "uuid").text = current["bmc"]["system_uuid"]
    ElementTree.SubElement(domain, "memory", unit="GiB").text = "64"
    ElementTree.SubElement(domain, "vcpu").text = "8"
    os_element = ElementTree.SubElement(domain, "os", firmware="efi")
    ElementTree.SubElement(os_element, "type", arch="x86_64", machine="q35").text = "hvm"
    ElementTree.SubElement(os_element, "boot", dev="hd")
    devices = ElementTree.SubElement(domain, "devices")
    disk = ElementTree.SubElement(devices, "disk", type="file", device="disk")
    ElementTree.SubElement(disk, "source", file=f"/var/lib/libvirt/images/{current['node']}.img")
    ElementTree.SubElement(disk, "target", dev="vda", bus="virtio")
    cdrom = ElementTree.SubElement(devices, "disk", type="file", device="cdrom")
    ElementTree.SubElement(cdrom, "target", dev="sda", bus="sata")
    ElementTree.SubElement(cdrom, "readonly")
    interface = ElementTree.SubElement(devices, "interface", type="network")
    ElementTree.SubElement(interface, "source", network="default")
    ElementTree.SubElement(interface, "model", type="virtio")
    metadata = ElementTree.SubElement(domain, "metadata")
    bios = ElementTree.SubElement(metadata, f"{{{_NAMESPACE}}}bios")
    attributes = ElementTree.SubElement(bios, f"{{{_NAMESPACE}}}attributes")
    for name, value in sorted(current["bmc"]["bios"].items()):
        ElementTree.SubElement(attributes, f"{{{_NAMESPACE}}}attribute", name=name, value=str(value))
    return ElementTree.tostring(domain, encoding="unicode")


def _bios_of(domain) -> dict:
    tree = ElementTree.fromstring(domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    found = tree.find(f".//{{{_NAMESPACE}}}attributes")
    return {} if found is None else {item.get("name"): item.get("value") for item in found}


def _persist(connection, domain, event, detail, opaque):
    if domain.name() != _NODE:
        return
    if event == libvirt.VIR_DOMAIN_EVENT_DEFINED:
        bios = _bios_of(domain)
        with _state.update(_SYSROOT) as current:
            current["bmc"]["bios"] = bios
    elif event in (libvirt.VIR_DOMAIN_EVENT_STARTED, libvirt.VIR_DOMAIN_EVENT_STOPPED):
        with _state.update(_SYSROOT) as current:
            current["bmc"]["power"] = "On" if event == libvirt.VIR_DOMAIN_EVENT_STARTED else "Off"


def _run_events():
    while True:
        libvirt.virEventRunDefaultImpl()


libvirt.virEventRegisterDefaultImpl()
LIBVIRT_CONNECTION = libvirt.open(SUSHY_EMULATOR_LIBVIRT_URI)
for _sample in LIBVIRT_CONNECTION.listAllDomains():
    if _sample.isActive():
        _sample.destroy()
    _sample.undefine()
_domain = LIBVIRT_CONNECTION.defineXML(_domain_xml(_initial))
if _initial["bmc"].get("power", "On") == "On":
    _domain.create()
LIBVIRT_EVENT_CALLBACK = LIBVIRT_CONNECTION.domainEventRegisterAny(
    None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, _persist, None)
LIBVIRT_EVENT_THREAD = threading.Thread(target=_run_events, name="libvirt-events", daemon=True)
LIBVIRT_EVENT_THREAD.start()

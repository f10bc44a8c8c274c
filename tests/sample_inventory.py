"""A small appliance built straight in the database, for the API, portal and browser tests.

It does not go through the site import on purpose: these tests check what the API and the portal
show of an inventory, whatever produced it.
"""

from dataclasses import dataclass

from appliance.inventory.models import (
    BMC,
    GPU,
    HCA,
    Appliance,
    Credential,
    Filesystem,
    HCAPort,
    Network,
    Node,
    Platform,
    Pool,
    PoolMembership,
    Switch,
)

# Distinctive enough that finding it anywhere (a response, a page, a log line) is a leak, never chance.
BMC_PASSWORD = "Bmc-pa55-Zq7xW-never-shown"


@dataclass
class SampleInventory:
    appliance: Appliance
    platform: Platform
    gpu_node: Node
    gpu_node_2: Node
    storage_node: Node
    gpu: GPU
    hca: HCA
    port: HCAPort
    switch: Switch
    network: Network
    filesystem: Filesystem
    training: Pool
    inference: Pool

    def ids(self) -> dict:
        """Placeholders for endpoint URLs: {node}, {gpu}, ..."""
        return {"appliance": self.appliance.pk, "platform": self.platform.pk, "node": self.gpu_node.pk,
                "node_name": self.gpu_node.name, "gpu": self.gpu.pk, "hca": self.hca.pk, "port": self.port.pk,
                "switch": self.switch.pk, "network": self.network.pk, "filesystem": self.filesystem.pk,
                "pool": self.training.pk}


def _gpu_node(appliance, platform, name: str, address: str, bmc_port: int) -> Node:
    node = Node.objects.create(appliance=appliance, name=name, role=Node.Role.GPU, platform=platform,
                               management_address=address, ipoib_addresses={"ib0": address.replace("10.0", "10.10")})
    credential, _ = Credential.objects.get_or_create(name="sample-bmc", defaults={
        "username": "root", "secret": BMC_PASSWORD,
        "endpoints": ["https://127.0.0.1:8001", "https://127.0.0.1:8002"]})
    BMC.objects.create(node=node, url=f"https://127.0.0.1:{bmc_port}/redfish/v1/", credential=credential,
                       verify_tls=False)
    gpus = [GPU.objects.create(node=node, index=i, uuid=f"GPU-{name}-{i:04d}-5f3a-9c1e", model=platform.gpu_model,
                               memory_mib=platform.gpu_memory_mib, pci_bus_id=f"0000:{0x18 + i * 0x10:02x}:00.0",
                               mig_capable=True, mig_mode=GPU.MigMode.ENABLED if i >= 6 else GPU.MigMode.DISABLED,
                               nvlink_peers=[j for j in range(8) if j != i])
            for i in range(platform.gpu_count)]
    for i, gpu in enumerate(gpus):
        hca = HCA.objects.create(node=node, device=f"mlx5_{i}", model="ConnectX-7", firmware_version="28.39.1002",
                                 node_guid=f"0x{i:04x}a088fffe{bmc_port:04x}")
        HCAPort.objects.create(hca=hca, port=1, guid=f"0x{i:04x}a088fffe{bmc_port:04x}", rate_gbps=400,
                               state="Active", physical_state="LinkUp", closest_gpu=gpu)
    return node


def build_sample_inventory() -> SampleInventory:
    appliance = Appliance.objects.create(name="demo", description="Simulated appliance for tests", simulated=True)
    platform = Platform.objects.create(slug="hgx-h100-8gpu", name="NVIDIA HGX H100 8-GPU server",
                                       file="hgx-h100-8gpu.yaml", digest="0" * 64, gpu_model="NVIDIA H100 80GB HBM3",
                                       gpu_count=8, gpu_memory_mib=81559, hca_count=8)
    gpu_node = _gpu_node(appliance, platform, "gpu-01", "10.0.0.11", 8001)
    gpu_node_2 = _gpu_node(appliance, platform, "gpu-02", "10.0.0.12", 8002)
    storage_node = Node.objects.create(appliance=appliance, name="storage-01", role=Node.Role.STORAGE,
                                       management_address="10.0.0.21")
    network = Network.objects.create(appliance=appliance, name="ib0", kind=Network.Kind.IPOIB, cidr="10.10.0.0/16",
                                     pkey="0x7fff", mtu=4092)
    switch = Switch.objects.create(appliance=appliance, name="ib-leaf-1", kind=Switch.Kind.INFINIBAND,
                                   model="QM9700", tier="leaf", management_address="10.0.1.1", port_count=64)
    filesystem = Filesystem.objects.create(appliance=appliance, name="scratch", type=Filesystem.Type.LUSTRE,
                                           servers=["storage-01"], source="10.10.0.21@o2ib:/scratch",
                                           mount_point="/mnt/scratch", options=["flock"])
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    PoolMembership.objects.create(pool=training, node=gpu_node)
    PoolMembership.objects.create(pool=inference, node=gpu_node_2)
    gpu = gpu_node.gpus.get(index=0)
    hca = gpu_node.hcas.get(device="mlx5_0")
    return SampleInventory(appliance=appliance, platform=platform, gpu_node=gpu_node, gpu_node_2=gpu_node_2,
                           storage_node=storage_node, gpu=gpu, hca=hca, port=hca.ports.get(), switch=switch,
                           network=network, filesystem=filesystem, training=training, inference=inference)

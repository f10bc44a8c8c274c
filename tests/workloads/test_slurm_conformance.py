"""slurm.conf details that Slurm's own tools read: MpiDefault names only an MPI type the nodes' packages
provide (`srun --mpi=list`), and GPUs are a trackable resource of Slurm's accounting (sacct)."""

import pytest

from appliance.partitioning.renderers.site import RenderError
from appliance.partitioning.renderers.slurm import NODE_PACKAGES, mpi_types, render_slurm_conf
from tests.partitioning.demo_site import demo_site


def with_slurm_settings(site, **slurm):
    from dataclasses import replace

    return replace(site, settings={**site.settings, "slurm": {**(site.settings.get("slurm") or {}), **slurm}})


def test_mpi_default_is_what_the_node_packages_provide():
    assert NODE_PACKAGES == ["munge", "slurmd", "slurm-client", "lbnl-nhc"]
    assert mpi_types() == ["pmi2", "none"]
    assert mpi_types([*NODE_PACKAGES, "libpmix2"]) == ["pmix", "pmi2", "none"]
    assert mpi_types(["munge"]) == ["none"]
    lines = render_slurm_conf(demo_site()).splitlines()
    assert [line for line in lines if line.startswith("MpiDefault=")] == ["MpiDefault=pmi2"]
    lines = render_slurm_conf(with_slurm_settings(demo_site(), mpi_default="none")).splitlines()
    assert [line for line in lines if line.startswith("MpiDefault=")] == ["MpiDefault=none"]


def test_pmix_is_refused_while_no_node_package_brings_it():
    with pytest.raises(RenderError) as refused:
        render_slurm_conf(with_slurm_settings(demo_site(), mpi_default="pmix"))
    assert str(refused.value) == ("slurm.mpi_default: pmix is not provided by the nodes' Slurm packages "
                                  "(munge, slurmd, slurm-client, lbnl-nhc), which give pmi2, none")


def test_gpus_are_in_slurm_accounting_where_a_slurmdbd_keeps_it():
    lines = render_slurm_conf(with_slurm_settings(demo_site(), accounting_storage_host="mgmt01")).splitlines()
    assert [line for line in lines if line.startswith("AccountingStorage")] == [
        "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=mgmt01",
        "AccountingStorageTRES=gres/gpu"]
    # Without slurmdbd, slurmctld refuses the GPU TRES ("slurmdbd is required to run with TRES gres/gpu"):
    # none is rendered, and the file says where GPU-hours come from instead.
    lines = render_slurm_conf(demo_site()).splitlines()
    assert [line for line in lines if "AccountingStorage" in line] == []
    assert "# No slurmdbd (slurm.accounting_storage_host): GPU-hours per job come from the appliance's telemetry" in lines
    with pytest.raises(RenderError, match="slurm.accounting_storage_host"):
        render_slurm_conf(with_slurm_settings(demo_site(), accounting_storage_host="db host\nX=1"))

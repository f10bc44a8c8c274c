"""Small site definitions for the upload tests: one valid, one with several errors. Their BMCs name the
credential `upload-bmc`, which the `site_credentials` fixture creates as an Administrator would."""

SITE_CREDENTIAL = "upload-bmc"
SITE_BMC_PASSWORD = "Site-bmc-Pw-7r2Kq-not-for-output"
SITE_BMC_ENDPOINTS = ["https://127.0.0.1:19441", "https://127.0.0.1:19442"]

VALID_SITE = f"""\
appliance:
  name: upload-demo
  description: Uploaded through the API
simulation: true
defaults:
  bmc:
    credential: {SITE_CREDENTIAL}
    verify_tls: false
networks:
  - {{name: ib0, kind: ipoib, cidr: 10.20.0.0/16, pkey: "0x7fff", mtu: 4092}}
nodes:
  - name: up-gpu01
    role: gpu
    platform: hgx-h100-8gpu
    gpus: 8
    management_address: 192.168.200.31
    bmc: {{url: "https://127.0.0.1:19441"}}
    ipoib: {{ib0: 10.20.2.1}}
  - name: up-gpu02
    role: gpu
    platform: hgx-h100-8gpu
    management_address: 192.168.200.32
    bmc: {{url: "https://127.0.0.1:19442"}}
pools:
  - {{name: training, kind: training, nodes: [up-gpu01]}}
"""

# Three mistakes: a URL that is not one, a GPU count the platform contradicts, a pool naming an unknown node.
BROKEN_SITE = VALID_SITE.replace('"https://127.0.0.1:19441"', "not-a-url").replace(
    "gpus: 8", "gpus: 4").replace("nodes: [up-gpu01]", "nodes: [up-gpu01, up-gpu99]")


def site_body() -> tuple[bytes, str]:
    return VALID_SITE.encode(), "application/yaml"

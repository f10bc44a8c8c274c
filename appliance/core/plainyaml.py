"""YAML as `kubectl` users read it: yaml.safe_dump without anchors and aliases. PyYAML writes `&id001` /
`*id001` wherever one Python object appears twice in the data (a label dict shared by a selector and a
template, one list of tolerations for several pools); valid YAML, but not what a manifest looks like, and
some tools refuse it. Every value is written out where it is used."""

from __future__ import annotations

import yaml


class PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:
        return True


def dump(data, *, sort_keys: bool = False) -> str:
    return yaml.dump(data, Dumper=PlainDumper, sort_keys=sort_keys, default_flow_style=False, allow_unicode=False)


def dump_all(documents, *, sort_keys: bool = False) -> str:
    return yaml.dump_all(documents, Dumper=PlainDumper, sort_keys=sort_keys, default_flow_style=False,
                         allow_unicode=False)

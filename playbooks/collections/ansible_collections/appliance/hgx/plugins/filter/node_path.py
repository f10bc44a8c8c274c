"""The `node_path` filter: a path of the node, joined to its sysroot and refused when it would leave it.

    dest: "{{ '/etc/modprobe.d/lnet.conf' | node_path(sysroot | default('')) }}"

Every file a stage writes is `{{ sysroot }}` + a path of the node (the sysroot is empty on a real
machine). Some paths carry values from the inventory (mount points, file names from site names), so
the join is never plain text concatenation: the path must be absolute and normalized (no '.' or '..'
component, no control character), and with a sysroot it is resolved (symbolic links included) and
must stay inside it. A simulated node's sysroot is a directory on the machine that runs the playbook
(its sshd listens on loopback), which is why resolving it here sees the node's files.
"""

import os

from ansible.errors import AnsibleFilterError


def node_path(path, sysroot=""):
    text = str(path)
    if not text.startswith("/"):
        raise AnsibleFilterError(f"node_path: {text!r} is not an absolute path of the node")
    if any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in text):
        raise AnsibleFilterError(f"node_path: {text!r} holds a control character")
    if any(part in (".", "..") for part in text.split("/")):
        raise AnsibleFilterError(f"node_path: {text!r} is not normalized ('.' or '..' component)")
    if not sysroot:
        return text
    root = os.path.realpath(str(sysroot))
    resolved = os.path.realpath(os.path.join(root, text.lstrip("/")))
    if resolved != root and not resolved.startswith(root + os.sep):
        raise AnsibleFilterError(f"node_path: {text} resolves to {resolved}, outside the node's sysroot {root}: refused")
    return resolved


class FilterModule:
    def filters(self):
        return {"node_path": node_path}

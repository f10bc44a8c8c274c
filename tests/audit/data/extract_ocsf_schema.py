"""Compile the parts of the OCSF schema that the export tests check against into one JSON file.

Source: https://github.com/ocsf/ocsf-schema, tag v1.1.0 (commit 8ea34523a316c4bad7e360e870a23a8e5cb29bd5),
files dictionary.json, categories.json, events/**, objects/**, includes/**, profiles/**.

Usage, from a clone (or a bare mirror) of that repository, naming the event classes to keep (the
ones appliance/audit/catalogue.py uses; the objects they reach are kept with them):

    python tests/audit/data/extract_ocsf_schema.py GIT_DIR refs/tags/v1.1.0 1007 3001 3002 3004 3005 6002 6003 6005 \
        > tests/audit/data/ocsf-1.1.0.json

What it does is what the OCSF schema server does when it compiles the schema, restricted to what a
validator needs: every event class and object with its `extends` chain and `$include` files merged
(a profile's attributes carry the profile's name unless the class sets `"profile": null`), each
attribute completed from the dictionary (type, is_array, enum with captions, sibling), and the
types with their base type, regex, maximum length and range. Descriptions are left out.
"""

import json
import subprocess
import sys

KEPT_ATTRIBUTE_KEYS = ("type", "is_array", "requirement", "enum", "profile", "sibling")


def git_files(git_dir: str, ref: str) -> dict[str, dict]:
    names = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", ref],
                           check=True, capture_output=True, text=True).stdout.split()
    wanted = [n for n in names if n.endswith(".json") and (
        n in ("dictionary.json", "categories.json", "version.json")
        or n.split("/")[0] in ("events", "objects", "includes", "profiles"))]
    files = {}
    for name in wanted:
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{ref}:{name}"],
                              check=True, capture_output=True, text=True).stdout
        files[name] = json.loads(text)
    return files


def merge(base, override):
    if not isinstance(base, dict) or not isinstance(override, dict):
        return override
    merged = dict(base)
    for key, value in override.items():
        merged[key] = merge(base[key], value) if key in base else value
    return merged


def own_attributes(item: dict, files: dict) -> dict:
    """An item's attributes with its `$include` files merged under them."""
    attributes = dict(item.get("attributes", {}))
    included = {}
    for path in attributes.pop("$include", []):
        include = files[path]
        group = include.get("annotations", {}).get("group")
        for name, attribute in include.get("attributes", {}).items():
            attribute = dict(attribute)
            if group and "group" not in attribute:
                attribute["group"] = group
            if include.get("meta") == "profile":
                attribute["profile"] = include["name"]
            included[name] = merge(included.get(name, {}), attribute)
    return merge(included, attributes)


def resolve(name: str, items: dict, files: dict, cache: dict) -> dict:
    if name in cache:
        return cache[name]
    item = items[name]
    parent = item.get("extends")
    base = resolve(parent, items, files, cache) if parent else {"attributes": {}, "profiles": [], "constraints": {}}
    resolved = {
        "attributes": merge(base["attributes"], own_attributes(item, files)),
        "profiles": sorted(set(base["profiles"]) | set(item.get("profiles", []))),
        "constraints": item.get("constraints", base["constraints"]),
        "category": item.get("category", base.get("category")),
        "uid": item.get("uid"),
        "caption": item.get("caption"),
    }
    cache[name] = resolved
    return resolved


def complete(attributes: dict, dictionary: dict) -> dict:
    completed = {}
    for name, attribute in sorted(attributes.items()):
        full = merge(dictionary.get(name, {}), attribute)
        kept = {key: full[key] for key in KEPT_ATTRIBUTE_KEYS if full.get(key) is not None}
        kept.setdefault("requirement", "optional")
        kept["is_array"] = bool(kept.get("is_array", False))
        if "enum" in kept:
            kept["enum"] = {str(value): entry.get("caption", "") for value, entry in sorted(
                kept["enum"].items(), key=lambda pair: (len(pair[0]), pair[0]))}
        completed[name] = kept
    return completed


def compile_schema(files: dict) -> dict:
    dictionary = files["dictionary.json"]["attributes"]
    categories = files["categories.json"]["attributes"]
    types = {}
    for name, entry in files["dictionary.json"]["types"]["attributes"].items():
        types[name] = {key: entry[key] for key in ("type", "regex", "max_len", "range", "values") if key in entry}
    objects_by_name = {f["name"]: f for path, f in files.items() if path.startswith("objects/")}
    events_by_name = {f["name"]: f for path, f in files.items() if path.startswith("events/")}
    object_cache, event_cache = {}, {}
    objects = {}
    for name in sorted(objects_by_name):
        resolved = resolve(name, objects_by_name, files, object_cache)
        objects[name] = {"attributes": complete(resolved["attributes"], dictionary),
                         "constraints": resolved["constraints"], "profiles": resolved["profiles"]}
    classes = {}
    for name in sorted(events_by_name):
        resolved = resolve(name, events_by_name, files, event_cache)
        category = resolved["category"]
        if resolved["uid"] is None or category not in categories:
            continue  # the abstract bases (base_event is uid 0 of no category; iam, system, ...)
        category_uid = categories[category]["uid"]
        class_uid = category_uid * 1000 + resolved["uid"]
        classes[str(class_uid)] = {
            "name": name, "caption": resolved["caption"],
            "category_uid": category_uid, "category_name": categories[category]["caption"],
            "attributes": complete(resolved["attributes"], dictionary),
            "constraints": resolved["constraints"], "profiles": resolved["profiles"],
        }
    return {"types": types, "objects": objects, "classes": classes}


def keep_classes(compiled: dict, class_uids: list[str]) -> dict:
    """Only the named classes, and the objects their attributes reach."""
    classes = {uid: compiled["classes"][uid] for uid in class_uids}
    reached, pending = set(), [a.get("type") for c in classes.values() for a in c["attributes"].values()]
    while pending:
        name = pending.pop()
        if name in compiled["objects"] and name not in reached:
            reached.add(name)
            pending += [a.get("type") for a in compiled["objects"][name]["attributes"].values()]
    return {"types": compiled["types"], "classes": classes,
            "objects": {name: compiled["objects"][name] for name in sorted(reached)}}


def main(git_dir: str, ref: str, class_uids: list[str]) -> None:
    files = git_files(git_dir, ref)
    commit = subprocess.run(["git", "--git-dir", git_dir, "rev-list", "-n1", ref], check=True,
                            capture_output=True, text=True).stdout.strip()
    compiled = keep_classes(compile_schema(files), class_uids)
    document = {
        "source": {
            "repository": "https://github.com/ocsf/ocsf-schema", "tag": ref.removeprefix("refs/tags/"), "commit": commit,
            "version": files["version.json"]["version"],
            "paths": ["dictionary.json", "categories.json", "version.json", "events/", "objects/", "includes/",
                      "profiles/"],
            "extracted_by": "tests/audit/data/extract_ocsf_schema.py",
        },
        **compiled,
    }
    json.dump(document, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])

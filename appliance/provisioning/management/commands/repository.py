"""`manage.py repository {build,verify,show}`: the package repository of air-gapped installs."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from appliance.core import context
from appliance.provisioning import repository


def _upstream(text: str) -> tuple[str, str, str]:
    parts = text.split()
    if len(parts) != 3 or not parts[0].startswith(("http://", "https://", "file:")):
        raise CommandError(f"--apt-upstream {text!r}: expected 'URL SUITE COMPONENT' "
                           "(e.g. 'https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64 / .')")
    return parts[0], parts[1], parts[2]


class Command(BaseCommand):
    help = ("Build (while online), verify or show the package repository the nodes install from: "
            "the NVML binding for the nodes' Python and the Debian packages of the platform.")

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        build = actions.add_parser("build", help="fill the repository (replaces the previous one when complete)")
        source = build.add_mutually_exclusive_group()
        source.add_argument("--from-registries", action="store_true",
                            help="download the wheels from PyPI (the default)")
        source.add_argument("--find-links", metavar="DIR",
                            help="take the wheels from this local folder only, offline (no index is asked)")
        build.add_argument("--python-version", action="append", metavar="3.N", dest="python_versions",
                           help="a Python version of the nodes (repeatable; default: 3.10, Ubuntu 22.04's, "
                                "and the simulated nodes' /usr/bin/python3)")
        build.add_argument("--apt-upstream", action="append", metavar="'URL SUITE COMPONENT'", default=[],
                           help="mirror the Debian packages from this repository (repeatable); without it, the "
                                "simulated appliance's catalogue is the upstream")
        build.add_argument("--apt-package", action="append", metavar="NAME", default=[],
                           help="with --apt-upstream: a package to mirror (default: the platform's list)")
        actions.add_parser("verify", help="check every file against the manifest's SHA-256")
        actions.add_parser("show", help="where the repository is and what it holds")

    def handle(self, *args, action, **options):
        with context.acting_as(channel="cli"):
            try:
                getattr(self, f"_{action}")(options)
            except repository.RepositoryError as exc:
                raise CommandError(str(exc)) from None

    def _build(self, options):
        upstreams = [_upstream(text) for text in options["apt_upstream"]]
        if options["apt_package"] and not upstreams:
            raise CommandError("--apt-package needs --apt-upstream")
        find_links = Path(options["find_links"]) if options["find_links"] else None
        manifest = repository.build(python_versions=options["python_versions"], find_links=find_links,
                                    apt_upstreams=upstreams, apt_packages=options["apt_package"] or None,
                                    say=lambda text: self.stdout.write(f"... {text}"))
        self.stdout.write(f"{repository.root()}: {len(manifest['files'])} files; Python "
                          f"{', '.join(manifest['python_versions'])}: "
                          f"{', '.join(f'{n}=={v}' for n, v in manifest['requirements'].items())}; "
                          f"{manifest['apt']['packages']} Debian packages ({manifest['apt']['source']})")

    def _verify(self, options):
        problems = repository.verify()
        repository.record_verify(problems)
        if problems:
            raise CommandError(f"{repository.root()}: {len(problems)} problem(s):\n" + "\n".join(problems))
        self.stdout.write(f"{repository.root()}: every file matches the manifest")

    def _show(self, options):
        manifest = repository.manifest()
        self.stdout.write(f"directory: {repository.root()}\npython versions: {', '.join(manifest['python_versions'])}\n"
                          + "".join(f"requirement: {line}\n" for line in repository.python_requirements())
                          + f"apt: suite {manifest['apt']['suite']}, component {manifest['apt']['component']}, "
                          f"{manifest['apt']['packages']} packages ({manifest['apt']['source']})\n"
                          f"files: {len(manifest['files'])}")

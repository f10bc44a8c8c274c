"""The API's JSON renderer (its own module: DRF's settings import it while DRF's views load)."""

from rest_framework import renderers


class JSONRenderer(renderers.JSONRenderer):
    """UTF-8 JSON. Text that is not valid Unicode (a lone surrogate a request sent, echoed in an error
    message) is written with \\u escapes instead of failing the whole response."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            self.ensure_ascii = True
            return super().render(data, accepted_media_type, renderer_context)

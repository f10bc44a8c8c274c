from appliance.formats.iso import *  # noqa: F403 - the same ISO formats in every language

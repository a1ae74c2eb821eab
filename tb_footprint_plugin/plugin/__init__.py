"""The Footprint TensorBoard plugin: routes, security, background jobs.

Nothing is imported here eagerly; ``tb_footprint_plugin.loader`` imports
``tb_footprint_plugin.plugin.plugin`` when TensorBoard loads the plugin.
"""


def __getattr__(name):
    if name == "FootprintPlugin":
        from tb_footprint_plugin.plugin.plugin import FootprintPlugin

        return FootprintPlugin
    raise AttributeError(name)


__all__ = ["FootprintPlugin"]

//! Serves the `__NAME__` plugin: the broker starts this binary (see plugin.json).

fn main() {
    hearth_plugin::serve(__CRATE__::GreeterPlugin)
}

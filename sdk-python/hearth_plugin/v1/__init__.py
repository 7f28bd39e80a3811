"""Generated gRPC stubs of package hearth.v1 (scripts/gen-stubs); do not edit."""

"""Generated protobuf and gRPC code for the engram.v1 API (make protos). Do not edit."""

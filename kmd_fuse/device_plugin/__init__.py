"""The Kubernetes device plugin (``npu-kmd device-plugin``): advertises a devroot's
emulated NPUs to the kubelet as the resource ``npu-emu.io/npu`` on its v1beta1 gRPC API.

``deviceplugin.proto`` is the API, written from its documentation with the kubelet's
field numbers; ``deviceplugin_pb2*.py`` are generated from it by grpcio-tools
(``scripts/gen-device-plugin-api``) and committed: the daemon then needs only grpcio and
protobuf at run time, and a test regenerates them and fails on any difference.
"""

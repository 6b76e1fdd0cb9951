# The federated wire protocol (federated/federation.proto) as a static library of the generated
# protobuf and gRPC code: pare_federation_wire(TARGET). Used by federated/ and by tests/fuzz, which
# builds pare's sources its own way. Needs Debian's libgrpc++-dev and protobuf-compiler-grpc.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
# Debian's re2 (under gRPC) asks for -pthread, which defines _REENTRANT and so makes GCC refuse the
# torch PCH (compiled without it) for every target that links the wire library; pare includes no re2
# header, and glibc needs no flag for threads.
set_property(TARGET re2::re2 PROPERTY INTERFACE_COMPILE_OPTIONS "")

function(pare_federation_wire target)
  get_filename_component(root ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/.. ABSOLUTE)
  set(proto ${root}/federated/federation.proto)
  set(gen ${CMAKE_CURRENT_BINARY_DIR}/gen)
  set(gen_srcs ${gen}/federation.pb.cc ${gen}/federation.grpc.pb.cc)
  add_custom_command(
    OUTPUT ${gen_srcs} ${gen}/federation.pb.h ${gen}/federation.grpc.pb.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${gen}
    COMMAND protobuf::protoc --proto_path=${root}/federated --cpp_out=${gen} --grpc_out=${gen}
            --plugin=protoc-gen-grpc=${GRPC_CPP_PLUGIN} ${proto}
    DEPENDS ${proto}
    COMMENT "protoc: federation.proto")
  add_library(${target} STATIC ${gen_srcs})
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${gen}>)
  target_link_libraries(${target} PUBLIC gRPC::grpc++ protobuf::libprotobuf)
endfunction()

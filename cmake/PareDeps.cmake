# Finds pare's dependencies (all Debian packages; see scripts/install-deps) and defines the
# interface target pare_deps that every pare library links.
#
# libtorch: Debian's (1.13, CPU) by default, or another one through Torch_DIR / CMAKE_PREFIX_PATH
# (on a GPU machine: python3 -c 'import torch; print(torch.utils.cmake_prefix_path)').
# PARE_DEPS_ROOT: a folder into which Debian's packages were unpacked (scripts/device-deps, for a
# machine without them): its usr/ is searched first, and the binaries find its libraries at run time.
set(PARE_DEPS_ROOT "" CACHE PATH "Folder with Debian packages unpacked by scripts/device-deps (empty: the system's)")
if(PARE_DEPS_ROOT)
  set(_deps_lib ${PARE_DEPS_ROOT}/usr/lib/x86_64-linux-gnu)
  list(PREPEND CMAKE_PREFIX_PATH ${PARE_DEPS_ROOT}/usr ${_deps_lib}/cmake ${PARE_DEPS_ROOT}/usr/share/cmake)
  list(PREPEND CMAKE_INCLUDE_PATH ${PARE_DEPS_ROOT}/usr/include)
  list(PREPEND CMAKE_LIBRARY_PATH ${_deps_lib})
  include_directories(BEFORE SYSTEM ${PARE_DEPS_ROOT}/usr/include)
  list(APPEND CMAKE_BUILD_RPATH ${_deps_lib})
  message(STATUS "pare: dependencies from ${PARE_DEPS_ROOT}")
endif()

find_package(Torch REQUIRED)
find_package(ONNX REQUIRED)
find_package(Protobuf REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)

# The libtorch major version selects the shim in core/torch_compat.h.
if(DEFINED Torch_VERSION AND Torch_VERSION)
  string(REGEX MATCH "^[0-9]+" PARE_TORCH_MAJOR "${Torch_VERSION}")
else()
  set(PARE_TORCH_MAJOR 1)
endif()
# CUDA and NCCL come with the libtorch (Debian's has neither): its CUDA libraries, and c10d's NCCL
# backend when its targets were built with it (USE_C10D_NCCL).
set(PARE_WITH_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR C10_CUDA_LIBRARY)
  set(PARE_WITH_CUDA ON)
endif()
set(_torch_defs "")
foreach(_t torch torch_cpu torch_cuda)
  if(TARGET ${_t})
    get_target_property(_d ${_t} INTERFACE_COMPILE_DEFINITIONS)
    if(_d)
      list(APPEND _torch_defs ${_d})
    endif()
  endif()
endforeach()
set(_nccl_default OFF)
if(PARE_WITH_CUDA AND "USE_C10D_NCCL" IN_LIST _torch_defs)
  set(_nccl_default ON)
endif()
option(PARE_WITH_NCCL "c10d's NCCL process group (needs a libtorch with CUDA and NCCL)" ${_nccl_default})
message(STATUS "pare: libtorch ${Torch_VERSION} (major ${PARE_TORCH_MAJOR}), CUDA ${PARE_WITH_CUDA}, NCCL ${PARE_WITH_NCCL}")

add_library(pare_deps INTERFACE)
target_link_libraries(pare_deps INTERFACE ${TORCH_LIBRARIES} onnx onnx_proto protobuf::libprotobuf
                      nlohmann_json::nlohmann_json ZLIB::ZLIB Threads::Threads)
target_include_directories(pare_deps INTERFACE $<INSTALL_INTERFACE:include/pare>)
target_compile_definitions(pare_deps INTERFACE PARE_TORCH_MAJOR=${PARE_TORCH_MAJOR}
                           $<$<BOOL:${PARE_WITH_CUDA}>:PARE_WITH_CUDA> $<$<BOOL:${PARE_WITH_NCCL}>:PARE_WITH_NCCL>
                           $<$<BOOL:${PARE_WITH_NCCL}>:USE_C10D_NCCL>)

# Header views: a library shows only its own headers. A view is a folder of the build tree
# holding symbolic links to the source folders (or single headers) that one target exports; a
# module compiles against its own view and those of the libraries it links, so including a header
# of a module it may not use fails ("No such file or directory"). cli/ and tests/ see the whole
# tree. tests/arch/include_rules.py checks the finer rules (which single headers, no libtorch in
# pare_rt); tests/arch/forbidden_include/ shows the compile failure.
#
#   pare_header_view(TARGET PUBLIC|PRIVATE VIEW_NAME core/error.h export/runtime ...)
function(pare_header_view target scope name)
  set(view ${PROJECT_BINARY_DIR}/include-view/${name})
  foreach(entry ${ARGN})
    get_filename_component(parent ${view}/${entry} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(REMOVE ${view}/${entry})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${entry} ${view}/${entry} SYMBOLIC)
  endforeach()
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${view}>)
endfunction()

# One precompiled header for the torch includes, built once and reused by every target.
function(pare_use_pch target)
  target_precompile_headers(${target} REUSE_FROM pare_pch)
endfunction()

# Adds a static library from every .cpp in the current folder that no other target of the folder
# owns (the folder property PARE_OWNED_SOURCES lists those).
function(pare_module name)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  get_directory_property(owned PARE_OWNED_SOURCES)
  foreach(f ${owned})
    list(REMOVE_ITEM srcs ${CMAKE_CURRENT_SOURCE_DIR}/${f})
  endforeach()
  add_library(${name} STATIC ${srcs})
  target_link_libraries(${name} PUBLIC pare_deps ${ARGN})
  file(RELATIVE_PATH dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  pare_header_view(${name} PUBLIC ${name} ${dir})
  pare_use_pch(${name})
endfunction()

# pare_compress(): build a compressed model as part of a CMake build, with `pare pipeline`.
#
#   find_package(pare REQUIRED)   # includes this file
#   pare_compress(TARGET tiny_model RECIPE tiny.yaml OUTPUT tiny.int8.onnx)
#
#   pare_compress(TARGET <name> RECIPE <recipe.yaml> OUTPUT <model.onnx>
#                 [RUN_DIR <dir>] [DEPENDS <file>...] [ARGS <pipeline argument>...])
#
# adds a custom command that runs
#
#   <pare> pipeline <recipe> --run-dir <run dir> --out <OUTPUT> --quiet [ARGS...]
#
# and a target <name>, built by `all`, that depends on OUTPUT.
#
#   TARGET   name of the custom target (must not exist yet).
#   RECIPE   the pipeline recipe (YAML). Relative: to CMAKE_CURRENT_SOURCE_DIR.
#   OUTPUT   where the final model of the recipe is copied (`--out`). Relative: to
#            CMAKE_CURRENT_BINARY_DIR. Its folder is created (and RUN_DIR's parent).
#   RUN_DIR  the pipeline's run folder (stage folders, logs, report.html). Relative: to
#            CMAKE_CURRENT_BINARY_DIR. Default: ${CMAKE_CURRENT_BINARY_DIR}/pare-runs/<name>.
#   DEPENDS  further files the recipe reads (data files, an ONNX teacher, ...) whose change should
#            rerun the pipeline. Relative: to CMAKE_CURRENT_SOURCE_DIR. Targets may be named too.
#   ARGS     more arguments for `pare pipeline`, appended as given (e.g. --until quantize).
#
# The command runs in CMAKE_CURRENT_BINARY_DIR; `pare pipeline` reads paths in the recipe as
# relative to the recipe's folder, wherever it runs.
#
# What triggers a rebuild: the build system reruns the pipeline when OUTPUT is missing or older
# than the recipe, a DEPENDS file, or the pare executable. Nothing else is tracked by the build:
# files the recipe reads that are not in DEPENDS, and the data sets it names (fashion-mnist), do
# not rerun it. A rerun is cheap when little changed: the pipeline itself skips every stage whose
# inputs have the same content hash as in the run folder, so touching the recipe only recopies the
# final model, and an edited stage reruns from that stage on. `clean` deletes OUTPUT but keeps the
# run folder (the next build then recopies the cached result); delete RUN_DIR to start over.
#
# The pare executable: the variable PARE_EXECUTABLE when set (an absolute path), else the
# imported target pare::pare_cli of the installed package. The target gets the properties
# PARE_OUTPUT and PARE_RUN_DIR (absolute paths), e.g. $<TARGET_PROPERTY:tiny_model,PARE_OUTPUT>.

# Script mode, the build step's last command: OUTPUT must exist (a recipe whose stages write no
# model gives none), and its time stamp is made new, which is the build's record that it is up to
# date even when the pipeline did not rewrite an unchanged model.
if(CMAKE_SCRIPT_MODE_FILE AND DEFINED PARE_COMPRESS_CHECK_OUTPUT)
  if(NOT EXISTS "${PARE_COMPRESS_CHECK_OUTPUT}")
    message(FATAL_ERROR "pare pipeline wrote no '${PARE_COMPRESS_CHECK_OUTPUT}': "
      "the recipe has no stage that writes a model")
  endif()
  file(TOUCH_NOCREATE "${PARE_COMPRESS_CHECK_OUTPUT}")
  return()
endif()

include_guard(GLOBAL)

function(pare_compress)
  cmake_parse_arguments(PARSE_ARGV 0 _pc "" "TARGET;RECIPE;OUTPUT;RUN_DIR" "DEPENDS;ARGS")
  if(_pc_UNPARSED_ARGUMENTS)
    string(REPLACE ";" " " _unparsed "${_pc_UNPARSED_ARGUMENTS}")
    message(FATAL_ERROR "pare_compress: unknown argument(s) '${_unparsed}' "
      "(arguments: TARGET, RECIPE, OUTPUT, RUN_DIR, DEPENDS, ARGS)")
  endif()
  foreach(_kw TARGET RECIPE OUTPUT)
    if(NOT _pc_${_kw})
      message(FATAL_ERROR "pare_compress: missing ${_kw} argument (${_kw} <value> is required)")
    endif()
  endforeach()
  if(DEFINED _pc_KEYWORDS_MISSING_VALUES AND "RUN_DIR" IN_LIST _pc_KEYWORDS_MISSING_VALUES)
    message(FATAL_ERROR "pare_compress(${_pc_TARGET}): RUN_DIR given without a value")
  endif()
  if(TARGET ${_pc_TARGET})
    message(FATAL_ERROR "pare_compress: TARGET '${_pc_TARGET}' already exists")
  endif()

  get_filename_component(_recipe "${_pc_RECIPE}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${_recipe}" OR IS_DIRECTORY "${_recipe}")
    message(FATAL_ERROR "pare_compress(${_pc_TARGET}): RECIPE '${_recipe}' is not a file")
  endif()
  get_filename_component(_output "${_pc_OUTPUT}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  get_filename_component(_output_dir "${_output}" DIRECTORY)
  if(_pc_RUN_DIR)
    get_filename_component(_run_dir "${_pc_RUN_DIR}" ABSOLUTE
                           BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  else()
    set(_run_dir "${CMAKE_CURRENT_BINARY_DIR}/pare-runs/${_pc_TARGET}")
  endif()

  # DEPENDS is the last list before ARGS, so a misspelt keyword after it lands in it: a word in
  # capitals that is neither a file nor a target is taken for one.
  set(_depends "")
  foreach(_dep IN LISTS _pc_DEPENDS)
    if(_dep MATCHES "^[A-Z][A-Z0-9_]*$" AND NOT TARGET "${_dep}"
       AND NOT EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${_dep}")
      message(FATAL_ERROR "pare_compress(${_pc_TARGET}): unknown argument '${_dep}' "
        "(arguments: TARGET, RECIPE, OUTPUT, RUN_DIR, DEPENDS, ARGS)")
    endif()
    if(TARGET "${_dep}" OR _dep MATCHES "^\\$<")
      list(APPEND _depends "${_dep}")
    else()
      get_filename_component(_dep "${_dep}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
      list(APPEND _depends "${_dep}")
    endif()
  endforeach()

  if(PARE_EXECUTABLE)
    if(NOT IS_ABSOLUTE "${PARE_EXECUTABLE}")
      message(FATAL_ERROR "pare_compress(${_pc_TARGET}): PARE_EXECUTABLE must be an absolute path, "
        "got '${PARE_EXECUTABLE}'")
    endif()
    set(_pare "${PARE_EXECUTABLE}")
  elseif(TARGET pare::pare_cli)
    set(_pare "$<TARGET_FILE:pare::pare_cli>")
  else()
    message(FATAL_ERROR "pare_compress(${_pc_TARGET}): no pare executable: find_package(pare) "
      "defines pare::pare_cli, or set PARE_EXECUTABLE to its path")
  endif()

  get_filename_component(_run_parent "${_run_dir}" DIRECTORY)
  file(RELATIVE_PATH _output_rel "${CMAKE_BINARY_DIR}" "${_output}")
  if(_output_rel MATCHES "^\\.\\./")
    set(_output_rel "${_output}")
  endif()
  get_filename_component(_recipe_name "${_recipe}" NAME)
  add_custom_command(OUTPUT "${_output}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${_output_dir}" "${_run_parent}"
    COMMAND "${_pare}" pipeline "${_recipe}" --run-dir "${_run_dir}" --out "${_output}" --quiet
            ${_pc_ARGS}
    COMMAND "${CMAKE_COMMAND}" "-DPARE_COMPRESS_CHECK_OUTPUT=${_output}"
            -P "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
    DEPENDS "${_recipe}" ${_depends} "${_pare}"
    WORKING_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}"
    COMMENT "pare pipeline ${_recipe_name}: compressing into ${_output_rel} (run folder ${_run_dir})"
    VERBATIM)
  add_custom_target(${_pc_TARGET} ALL DEPENDS "${_output}")
  set_target_properties(${_pc_TARGET} PROPERTIES
                        PARE_OUTPUT "${_output}" PARE_RUN_DIR "${_run_dir}")
endfunction()

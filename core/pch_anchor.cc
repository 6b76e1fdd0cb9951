// Anchors the precompiled header target (see core/CMakeLists.txt).

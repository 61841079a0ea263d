// Force-included into every C++ file of a wheel build (cmake/wheel.cmake). GCC 12's libstdc++ gave
// std::condition_variable::wait a second version, GLIBCXX_3.4.30, which only Ubuntu 22.04's and newer libstdc++
// carry; binding to the version it has had since GCC 4.4 (the same function) keeps the wheel within
// manylinux_2_34's libstdc++ (RHEL 9, which tools/package.sh's auditwheel check enforces).
#ifdef __cplusplus
__asm__(".symver _ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE,"
        "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11");
#endif

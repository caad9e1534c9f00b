/* kestrel/common.h - export macros and basic includes. */
#ifndef KESTREL_COMMON_H
#define KESTREL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(KESTREL_STATIC)
# define KESTREL_API
#elif defined(_WIN32)
# if defined(KESTREL_BUILDING)
#  define KESTREL_API __declspec(dllexport)
# else
#  define KESTREL_API __declspec(dllimport)
# endif
#elif defined(__GNUC__)
# define KESTREL_API __attribute__((visibility("default")))
#else
# define KESTREL_API
#endif

#if defined(_MSC_VER)
# define KESTREL_CALLBACK(name) (__cdecl *name)
#else
# define KESTREL_CALLBACK(name) (*name)
#endif

#if defined(__GNUC__)
# define KESTREL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
# define KESTREL_DEPRECATED(msg)
#endif

#ifdef __cplusplus
# define KESTREL_BEGIN_DECL extern "C" {
# define KESTREL_END_DECL }
#else
# define KESTREL_BEGIN_DECL
# define KESTREL_END_DECL
#endif

#endif

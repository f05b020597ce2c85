// HORA_API marks the symbols libhora exports; everything else is hidden (-fvisibility=hidden).
#pragma once
#define HORA_API __attribute__((visibility("default")))

// json.h: the JSON writers that mt's outputs share (mtc's --summary --json
// and --explain --json, mtrun's metrics log): a string with its escapes, and
// a number that stays JSON. JSON has no inf or nan: a double that is not
// finite is written null, and the field's reader takes null as "none".
#ifndef MT_JSON_H
#define MT_JSON_H

#include <stdio.h>

// s as a JSON string: quotes and backslashes escaped, control bytes as
// \u00XX; NULL as "".
void json_str(FILE *f, const char *s);

// v in printf's fmt (a double's conversion, "%.6g"), or null when v is
// not finite.
void json_num(FILE *f, const char *fmt, double v);

#endif

"""The bundled sample conversation that `memdb demo` stores (sample.json): package data, made a
package so setuptools ships it as one instead of warning that it is missing from `packages`."""

/* Placeholder so a module without sources yet still forms a library. */
typedef int fivefold_empty_translation_unit;

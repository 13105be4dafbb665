/* PLACEHOLDER: being written */
/* todo */

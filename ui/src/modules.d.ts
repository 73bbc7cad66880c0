/**
 * Module names these sources import without bundling them: the console's
 * shared React (`react`, resolved by the console's import map at run time)
 * and, in the tests and the console-host stand-in, React DOM.
 */
declare module "react";
declare module "react-dom/client";
declare module "react-dom/server";
declare module "react-dom";
declare module "react/jsx-runtime";

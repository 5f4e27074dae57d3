// Help > Instruments: a non-modal dialog with a QTextBrowser showing the instruments page shipped
// in the app's resources (resources/docs/instruments.md): what each instrument computes, the paper
// it follows (authors, year) and how to read its plot. Not the README; no network access.
#pragma once
#include <QString>

class QDialog;
class QWidget;

namespace hl::app {

// The page's Markdown text (empty if the resource is missing).
QString instrumentsHelpText();
// Opens (or raises) the dialog over `parent` and returns it; it deletes itself when closed.
QDialog* showInstrumentsHelp(QWidget* parent);

}  // namespace hl::app
